"""Task events: the unit of every change, and how they fold into a task.

Every saved change of a task is a short list of events appended to the
task's log in the same atomic step (see `shared.store.contract.Store`):

- a status update (A2A `TaskStatusUpdateEvent`): the new status, with the
  agent's message if it has one;
- an artifact update (A2A `TaskArtifactUpdateEvent`): a whole artifact, or
  a chunk of one (`append`, `lastChunk`);
- a message: a user's follow-up, or an agent's direct reply (A2A lets an
  agent answer with a Message instead of a task).

Folding the log over the first version of a task gives the task as it
stands; stores keep a snapshot so that a read folds only a short tail.
Events are kept in the stored (A2A 0.3) shape and translated at the edge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, NotRequired, TypedDict

from shared.attempts import FIELD as RUN
from shared.attempts import merged
from shared.generation import FIELD as GENERATION
from shared.generation import generation_of
from shared.task import (
    INTERRUPTED_STATES,
    STATES,
    Artifact,
    Message,
    Task,
    TaskStatus,
    is_terminal,
    now_iso,
)


class StatusUpdate(TypedDict):
    kind: Literal["status-update"]
    taskId: str
    contextId: str
    status: TaskStatus
    final: bool  # the task stopped: terminal, or waiting for the peer
    metadata: NotRequired[dict[str, Any]]
    generation: NotRequired[int]  # the task's after this update (shared.generation)
    run: NotRequired[dict[str, Any]]  # changes to the task's run record (shared.attempts)


class ArtifactUpdate(TypedDict):
    kind: Literal["artifact-update"]
    taskId: str
    contextId: str
    artifact: Artifact
    append: bool
    lastChunk: bool
    metadata: NotRequired[dict[str, Any]]
    generation: NotRequired[int]
    run: NotRequired[dict[str, Any]]


class CheckpointSaved(TypedDict):
    """A run's checkpoint (`shared.attempts`): kept in the log for a later
    attempt, never shown to a peer (followers pass over it: `is_private`)."""

    kind: Literal["checkpoint"]
    taskId: str
    run: dict[str, Any]


Event = StatusUpdate | ArtifactUpdate | Message | CheckpointSaved
# What a change computes from the current task: the events it appends.
Change = Callable[[Task], Sequence[Event]]


def status_update(task: Task, state: str, message: Message | None = None) -> StatusUpdate:
    if state not in STATES:
        raise ValueError(f"unknown task state {state!r}")
    status: TaskStatus = {"state": state, "timestamp": now_iso()}
    if message is not None:
        status["message"] = _addressed(task, message)
    return {
        "kind": "status-update",
        "taskId": task["id"],
        "contextId": context_of(task),
        "status": status,
        "final": is_terminal(state) or state in INTERRUPTED_STATES,
    }


def current_status(task: Task) -> StatusUpdate:
    """The status update saying what `task`'s status is (its own timestamp):
    the first event of a new task, and the event of a task saved whole
    (which carries the generation the task is saved at)."""
    status = task["status"]
    state = status.get("state", "")
    event: StatusUpdate = {
        "kind": "status-update",
        "taskId": task["id"],
        "contextId": context_of(task),
        "status": status,
        "final": is_terminal(state) or state in INTERRUPTED_STATES,
    }
    if GENERATION in task:
        event["generation"] = generation_of(task)
    return event


def artifact_update(
    task: Task, artifact: Artifact, *, append: bool = False, last_chunk: bool = True
) -> ArtifactUpdate:
    return {
        "kind": "artifact-update",
        "taskId": task["id"],
        "contextId": context_of(task),
        "artifact": artifact,
        "append": append,
        "lastChunk": last_chunk,
    }


def checkpoint_event(task: Task, run: dict[str, Any]) -> CheckpointSaved:
    return {"kind": "checkpoint", "taskId": task["id"], "run": run}


def is_private(event: Event) -> bool:
    """An event the service keeps for itself: no follower shows it."""
    return event["kind"] == "checkpoint"


def message_added(task: Task, message: Message) -> Message:
    return _addressed(task, message)


def to_state(state: str, message: Message | None = None) -> Change:
    """The change that moves a task to `state`, with an optional agent message."""
    return lambda task: [status_update(task, state, message)]


def identity(event: Event) -> tuple[object, ...]:
    """What tells one saved change from another, whenever it was stamped:
    its kind, state, and the ids of the message or artifact it carries."""
    kind = event["kind"]
    if kind == "status-update":
        status = event["status"]  # type: ignore[typeddict-item]
        return (kind, status.get("state"), (status.get("message") or {}).get("messageId"))
    if kind == "artifact-update":
        artifact = event["artifact"]  # type: ignore[typeddict-item]
        parts = len(artifact.get("parts") or [])
        return (
            kind,
            artifact.get("artifactId"),
            event.get("append"),
            event.get("lastChunk"),
            parts,
        )
    if kind == "message":
        return (kind, event.get("messageId"))
    return (kind, repr(event.get("run")))


def state_after(events: Iterable[Event], current: str) -> str:
    for event in events:
        if event["kind"] == "status-update":
            current = event["status"]["state"]
    return current


def fold(task: Task, events: Iterable[Event]) -> Task:
    """`task` with `events` applied; `task` itself is not modified (only the
    containers an event touches are copied, so a chunk costs no deep copy)."""
    folded: Task = {**task}
    for event in events:
        kind = event["kind"]
        if GENERATION in event:
            folded["generation"] = event["generation"]  # type: ignore[typeddict-item]
        if RUN in event:
            folded["run"] = merged(folded, event)
        if kind == "status-update":
            status = event["status"]  # type: ignore[typeddict-item]
            folded["status"] = status
            if "message" in status:
                folded["history"] = _appended(folded.get("history"), status["message"])
        elif kind == "artifact-update":
            folded["artifacts"] = _with_artifact(folded.get("artifacts") or [], event)  # type: ignore[arg-type]
        elif kind == "message":
            folded["history"] = _appended(folded.get("history"), event)  # type: ignore[arg-type]
    return folded


def _appended(history: list[Message] | None, message: Message) -> list[Message]:
    """The history with `message` at its end, unless it is already the last entry
    (an agent message recorded in both a status and a history)."""
    history = history or []
    if history and history[-1].get("messageId") == message.get("messageId"):
        return history
    return [*history, message]


def _with_artifact(artifacts: list[Artifact], update: ArtifactUpdate) -> list[Artifact]:
    incoming = update["artifact"]
    for index, existing in enumerate(artifacts):
        if existing.get("artifactId") != incoming.get("artifactId"):
            continue
        if update["append"]:
            merged: Artifact = {**existing, "parts": [*existing["parts"], *incoming["parts"]]}
        else:
            merged = incoming
        return [*artifacts[:index], merged, *artifacts[index + 1 :]]
    return [*artifacts, incoming]


def context_of(task: Task) -> str:
    """The task's context id; "" for a task saved without one (a store's
    contract requires only `id` and `status`), so its events still carry the
    field every A2A event has."""
    return task.get("contextId", "")


def _addressed(task: Task, message: Message) -> Message:
    addressed: Message = {**message, "taskId": task["id"]}
    if "contextId" in task:
        addressed["contextId"] = task["contextId"]
    return addressed
