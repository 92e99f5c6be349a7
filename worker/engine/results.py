"""What a function's results and progress become: the events that save them.

- a `str` or `{"text": ...}`: a `result` text artifact, then completed with
  the text as the agent's message;
- `Done(message, artifacts)`: the artifacts, then completed (with the message);
- an `Artifact`, a list of them, a `File` or `Data`: the artifact(s), completed;
- `Reply(message)`: the agent's message itself, then completed;
- `Ask`, `NeedAuth`, `Reject`: input-required, auth-required, rejected, with
  the message; `{"status": "pending", "text": ...}`: input-required;
- yielded `Progress` or `str`: a working status with the message; a yielded
  `Artifact`: the artifact, while working; a `Chunk`: appended to the
  artifact of its name.

Anything else fails the task, quoting what came back.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, cast

from shared.attempts import Run, checkpoint_saved, published
from shared.codec import strict_json
from shared.events import (
    Change,
    Event,
    artifact_update,
    checkpoint_event,
    message_added,
    status_update,
)
from shared.failures import Failure, run_change
from shared.mappings import is_mapping
from shared.quoting import shown
from shared.task import (
    AUTH_REQUIRED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    REJECTED,
    REPEATS_RESULT,
    WORKING,
    Message,
    Part,
    Task,
    new_id,
)
from shared.task import (
    Artifact as StoredArtifact,
)
from toolnexus import (
    Artifact,
    Ask,
    Checkpoint,
    Chunk,
    Data,
    Done,
    File,
    NeedAuth,
    Progress,
    Reject,
    Reply,
)

RESULT_ARTIFACT = "result"
_STOPS = {Ask: INPUT_REQUIRED, NeedAuth: AUTH_REQUIRED, Reject: REJECTED}
_SHOWN = 200  # characters of an unsupported value quoted in the failure message


class UnsupportedResult(ValueError):
    """The function returned or yielded something this service cannot save."""


def final_change(result: object, *, after_output: bool = False) -> Change:
    """The change that saves a function's final result. `after_output`: the
    function already yielded output, so ending with nothing completes the task."""
    if isinstance(result, str):
        return _completed_with_text(result)
    if is_mapping(result) and isinstance(result.get("text"), str):
        if result.get("status") == "pending":
            return _stopped(INPUT_REQUIRED, result["text"])
        if "status" not in result:
            return _completed_with_text(result["text"])
    if isinstance(result, Done):
        artifacts = [stored_artifact(artifact) for artifact in result.artifacts]
        return _completed(artifacts, result.message)
    if isinstance(result, Artifact | File | Data) or _artifacts(result):
        items = result if isinstance(result, list | tuple) else [result]
        return _completed([stored_artifact(_as_artifact(item)) for item in items], None)
    if isinstance(result, Reply):
        reply = agent_message(result.message)
        return lambda task: [message_added(task, reply), status_update(task, COMPLETED)]
    if isinstance(result, Ask | NeedAuth | Reject):
        return _stopped(_STOPS[type(result)], result.message)
    if result is None and after_output:
        return _completed([], None)
    raise UnsupportedResult(
        f"the fulfilment function returned {shown(result, _SHOWN)}; expected a string,"
        " {'text': ...}, {'status': 'pending', 'text': ...} or a toolnexus result"
        " (Done, Artifact, File, Data or a list of them, Reply, Ask, NeedAuth, Reject)"
    )


class RunProgress:
    """The progress of one run: which artifact each chunk name writes to and,
    where a later attempt may read it (`counting`), how many items the run
    published since its checkpoint, recorded with each (`shared.attempts`).
    A run of a later attempt goes on from what the task's run record says
    (`run`): chunks append to the artifacts already begun, and the first
    items it yields that the lost run had published after the checkpoint
    are counted but not published again (`already_published`)."""

    def __init__(self, run: Run | None = None, *, counting: bool = False) -> None:
        self._chunked: dict[str, str] = dict(run.chunks) if run is not None else {}
        self._counting = counting
        self._published = 0
        self._lost = run.published if run is not None and run.attempt > 1 else 0

    def already_published(self) -> bool:
        """Whether the next item is one the lost run published (then counted here)."""
        if self._published < self._lost:
            self._published += 1
            return True
        return False

    def checkpoint(self, item: Checkpoint) -> Change:
        """The change that saves a checkpoint: nothing published since."""
        try:
            strict_json(item.value)
        except (TypeError, ValueError) as error:
            raise UnsupportedResult(
                f"Checkpoint({shown(item.value, _SHOWN)}) is not JSON: {error}"
            ) from None
        self._published = self._lost = 0
        run = checkpoint_saved(item.value, self._chunked)
        return lambda task: [checkpoint_event(task, run)]

    def change(self, item: object) -> Change:
        """The change that saves one yielded item, while the task is working."""
        change = self._change(item)
        if not self._counting:
            return change
        self._published += 1
        return with_run(change, published(self._published, self._chunked))

    def _change(self, item: object) -> Change:
        if isinstance(item, str | Progress):
            message = agent_message(item if isinstance(item, str) else item.message)
            return lambda task: [status_update(task, WORKING, message)]
        if isinstance(item, Artifact):
            artifact = stored_artifact(item)
            return lambda task: [artifact_update(task, artifact)]
        if isinstance(item, Chunk):
            return self._chunk(item)
        raise UnsupportedResult(
            f"the fulfilment function yielded {shown(item, _SHOWN)}; expected a str,"
            " Progress, Artifact, Chunk or Checkpoint (or a final result: Done, Reply, Ask,"
            " NeedAuth, Reject)"
        )

    def _chunk(self, chunk: Chunk) -> Change:
        existing = self._chunked.get(chunk.artifact)
        artifact_id = existing or new_id()
        self._chunked[chunk.artifact] = artifact_id
        artifact: StoredArtifact = {
            "artifactId": artifact_id,
            "name": chunk.artifact,
            "parts": stored_parts(chunk.parts),
        }
        return lambda task: [
            artifact_update(task, artifact, append=existing is not None, last_chunk=chunk.last)
        ]


def with_run(change: Change, run: Mapping[str, Any]) -> Change:
    """`change` with `run` merged into the task's run record by its last event."""

    def changed(task: Task) -> list[Event]:
        *before, last = change(task)
        earlier = cast(Mapping[str, Any], last.get("run") or {})
        return [*before, cast(Event, {**last, "run": {**earlier, **run}})]

    return changed


def failed(reason: str, failure: Failure) -> Change:
    """The change that fails a task saying `reason`, its cause recorded
    privately for triage (`shared.failures`)."""
    stop = agent_message(reason)
    record = run_change(failure)

    def change(task: Task) -> list[Event]:
        event = status_update(task, FAILED, stop)
        event["run"] = record
        return [event]

    return change


def agent_message(parts: Any) -> Message:
    return {"kind": "message", "role": "agent", "messageId": new_id(), "parts": stored_parts(parts)}


def stored_artifact(artifact: Artifact) -> StoredArtifact:
    stored: StoredArtifact = {"artifactId": new_id(), "parts": stored_parts(artifact.parts)}
    if artifact.name is not None:
        stored["name"] = artifact.name
    if artifact.description is not None:
        stored["description"] = artifact.description
    if artifact.metadata is not None:
        stored["metadata"] = dict(artifact.metadata)
    return stored


def stored_parts(parts: Any) -> list[Part]:
    items = parts if isinstance(parts, list | tuple) else [parts]
    if not items:
        raise UnsupportedResult("a message or artifact needs at least one part")
    return [_stored_part(item) for item in items]


def _stored_part(item: object) -> Part:
    if isinstance(item, str):
        return {"kind": "text", "text": item}
    if isinstance(item, Data):
        try:
            strict_json(item.value)
        except (TypeError, ValueError) as error:
            raise UnsupportedResult(f"Data({shown(item.value)}) is not JSON: {error}") from None
        return {"kind": "data", "data": item.value}
    if isinstance(item, File):
        file: dict[str, str] = {}
        if item.content is not None:
            file["bytes"] = base64.b64encode(item.content).decode("ascii")
        else:
            file["uri"] = str(item.url)
        if item.name is not None:
            file["name"] = item.name
        if item.media_type is not None:
            file["mimeType"] = item.media_type
        return {"kind": "file", "file": file}  # type: ignore[typeddict-item]
    raise UnsupportedResult(
        f"{shown(item, _SHOWN)} is not a part; use a str, toolnexus.File or toolnexus.Data"
    )


def _completed_with_text(text: str) -> Change:
    artifact = stored_artifact(Artifact(text, name=RESULT_ARTIFACT))
    return _completed([artifact], text, repeats_result=True)


def _completed(
    artifacts: Sequence[StoredArtifact], message: Any, *, repeats_result: bool = False
) -> Change:
    """The artifacts, then completed; `repeats_result`: the message is the
    text result again, marked so that 1.0 peers read the answer once."""
    reply = agent_message(message) if message is not None else None

    def change(task: Task) -> list[Event]:
        events: list[Event] = [artifact_update(task, artifact) for artifact in artifacts]
        completed = status_update(task, COMPLETED, reply)
        if repeats_result:
            completed["status"][REPEATS_RESULT] = True
        events.append(completed)
        return events

    return change


def _stopped(state: str, message: Any) -> Change:
    stop = agent_message(message)
    return lambda task: [status_update(task, state, stop)]


def _as_artifact(item: object) -> Artifact:
    if isinstance(item, Artifact):
        return item
    return Artifact(item, name=RESULT_ARTIFACT)  # type: ignore[arg-type]


def _artifacts(result: object) -> bool:
    return (
        isinstance(result, list | tuple)
        and bool(result)
        and all(isinstance(item, Artifact) for item in result)
    )
