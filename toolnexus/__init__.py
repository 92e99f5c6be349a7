"""What an agent function returns or yields, in plain Python.

    from toolnexus import Artifact, Ask, Chunk, Data, Done, File, Progress, Reject, Reply

A function named by TOOLNEXUS_RUN may return a string (the task completes
with it) or any of these; a generator function may also yield progress
(`Progress`, `Artifact`, `Chunk`) before it finishes. Wherever parts are
taken, give one part or a list: a `str` is a text part, `File` a file,
`Data` a JSON value. No base class, no registration: plain values.

The function's parameters are chosen by name: `text` (the latest user
message as text), `message` (that whole message, with `parts_of` to read
its files and data), `task` (the stored task, a copy), `attempt` (which
run of the turn this is, from 1; see `Retry`) and `checkpoint` (what the
last `Checkpoint` an earlier attempt yielded holds; None when none did).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class File:
    """A file part: raw `content` or a `url` (exactly one), with an optional
    file name and media type."""

    content: bytes | None = None
    url: str | None = None
    name: str | None = None
    media_type: str | None = None

    def __post_init__(self) -> None:
        if (self.content is None) == (self.url is None):
            raise ValueError("File needs exactly one of content (bytes) or url")


@dataclass(frozen=True)
class Data:
    """A data part: any JSON value (an object, a list, a number, ...)."""

    value: Any


PartLike = str | File | Data
Parts = PartLike | Sequence[PartLike]


@dataclass(frozen=True)
class Artifact:
    """An output of the task. Return one (or a list) to complete with it, or
    yield it from a generator to publish it while the task is still working."""

    parts: Parts
    name: str | None = None
    description: str | None = None
    metadata: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Chunk:
    """A piece of an artifact that is still being written (yield it from a
    generator): chunks with the same `artifact` name make one artifact, in
    the order yielded; mark the final piece with `last=True`."""

    parts: Parts
    artifact: str = "result"
    last: bool = False


@dataclass(frozen=True)
class Progress:
    """A status message while the task is working (yield it from a generator)."""

    message: Parts


@dataclass(frozen=True)
class Done:
    """Complete the task with closing words and/or artifacts."""

    message: Parts | None = None
    artifacts: Sequence[Artifact] = field(default_factory=tuple)


@dataclass(frozen=True)
class Reply:
    """Answer with a message instead of producing a task result: a blocking
    send returns this message itself (the task is still recorded as completed)."""

    message: Parts


@dataclass(frozen=True)
class Ask:
    """Stop and ask the peer for more input (the task becomes input-required;
    the peer's next message to the task runs the function again)."""

    message: Parts


@dataclass(frozen=True)
class NeedAuth:
    """Stop until the peer has authorised something (auth-required); its next
    message to the task runs the function again."""

    message: Parts


@dataclass(frozen=True)
class Reject:
    """Decline the task (rejected), saying why."""

    message: Parts


@dataclass(frozen=True)
class Checkpoint:
    """Yield it from a generator to save how far it got (any JSON value): a
    later attempt of the task (TOOLNEXUS_MAX_ATTEMPTS) receives it as its
    `checkpoint` parameter and goes on from there."""

    value: Any


class Retry(Exception):
    """Raise it to ask for another attempt (a model API's 429, a time-out of
    the agent's own): the task stays `working` and the function is called
    again `after` seconds from now (None: the configured backoff), counted
    against TOOLNEXUS_MAX_ATTEMPTS; with none left the task fails, saying
    `reason`."""

    def __init__(self, reason: str, after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.after = after


def parts_of(message: Mapping[str, Any]) -> list[PartLike]:
    """A received message's parts as `str`, `File` and `Data` values."""
    found: list[PartLike] = []
    for part in message.get("parts") or []:
        kind = part.get("kind")
        if kind == "text":
            found.append(part["text"])
        elif kind == "data":
            found.append(Data(part["data"]))
        elif kind == "file":
            file = part["file"]
            content = base64.b64decode(file["bytes"]) if "bytes" in file else None
            found.append(
                File(
                    content=content,
                    url=file.get("uri") if content is None else None,
                    name=file.get("name"),
                    media_type=file.get("mimeType"),
                )
            )
    return found


__all__ = [
    "Artifact",
    "Ask",
    "Checkpoint",
    "Chunk",
    "Data",
    "Done",
    "File",
    "NeedAuth",
    "Parts",
    "Progress",
    "Reject",
    "Reply",
    "Retry",
    "parts_of",
]
