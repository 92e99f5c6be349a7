"""Example agents: `TOOLNEXUS_RUN=examples.agents:<name>`.

An agent is a plain function. Its parameters are chosen by name: `text`
(the latest user message as text), `message` (that whole message) and
`task` (the stored task). It returns a string, or a `toolnexus` result; it
may be `async`, and a generator may yield progress before it finishes.
Each function here is one example of "Writing an agent" (docs/agents.md).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from toolnexus import (
    Artifact,
    Ask,
    Chunk,
    Data,
    Done,
    File,
    Progress,
    Reject,
    Reply,
    parts_of,
)


def echo(text: str) -> str:
    """The default agent: plain text in, plain text out."""
    return f"ran: {text}"


def report(text: str) -> Done:
    """Artifacts with file and data parts."""
    words = text.split()
    return Done(
        "Here is your report.",
        artifacts=[
            Artifact(
                File(content=text.upper().encode(), name="shout.txt", media_type="text/plain"),
                name="shouted",
            ),
            Artifact(Data({"words": len(words), "longest": max(words, key=len, default="")})),
        ],
    )


def ask_back(text: str, task: dict[str, Any]) -> str | Ask:
    """Asks for a name first, then greets whoever answered."""
    asked = any(m.get("role") == "agent" for m in task.get("history", []))
    if not asked:
        return Ask("What is your name?")
    return f"Hello, {text}!"


def polite(text: str) -> str | Reject:
    """Declines what it will not do."""
    if "please" not in text.lower():
        return Reject("Ask nicely: say please.")
    return "Since you asked nicely: done."


def answer(text: str) -> Reply:
    """Answers with a message instead of a task result."""
    return Reply(f"You said {len(text)} characters.")


async def weather(text: str) -> str:
    """An async agent (awaiting an API would go here)."""
    await asyncio.sleep(0.01)
    return f"Sunny in {text or 'your town'}."


async def countdown(text: str) -> AsyncIterator[Any]:
    """A generator that reports progress and streams an artifact in chunks;
    a leading number sets how many (default 3), "0.2 5" pauses 0.2 s each."""
    head = text.split()
    pause = float(head[0]) if len(head) > 1 else 0.0
    count = int(head[-1]) if head and head[-1].isdigit() else 3
    yield Progress(f"counting down from {count}")
    for n in range(count, 0, -1):
        await asyncio.sleep(pause)
        yield Chunk(f"{n}... ", artifact="countdown")
    yield Chunk("liftoff!", artifact="countdown", last=True)
    yield Done("Counted down.")


def describe_parts(message: dict[str, Any]) -> str:
    """Reads every part it is sent: text, files and data."""
    seen = []
    for part in parts_of(message):
        if isinstance(part, str):
            seen.append(f"text: {part}")
        elif isinstance(part, File):
            size = len(part.content) if part.content is not None else None
            seen.append(f"file: {part.name or part.url} ({part.media_type}, {size} bytes)")
        elif isinstance(part, Data):
            seen.append(f"data: {json.dumps(part.value)}")
    return "\n".join(seen)


def slow(text: str) -> str:
    """Takes a few seconds: for cancel, heartbeat and scaling demos.

    A leading number sets the seconds, e.g. "0.3 hello".
    """
    head, _, rest = text.partition(" ")
    try:
        seconds = float(head)
    except ValueError:
        seconds, rest = 3.0, text
    time.sleep(seconds)
    return f"slept {seconds:g}s: {rest}"


def ticking(text: str) -> Iterator[Any]:
    """A synchronous generator: one progress message per second, for as many
    seconds as the leading number says (for streams and cancel demos)."""
    head, _, rest = text.partition(" ")
    seconds = int(head) if head.isdigit() else 3
    for n in range(seconds):
        yield Progress(f"tick {n + 1} of {seconds}")
        time.sleep(1)
    return f"ticked {seconds} times: {rest}"


def fail(text: str) -> str:
    raise RuntimeError(f"fail agent refused: {text}")
