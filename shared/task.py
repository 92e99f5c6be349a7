"""The stored task shape and the one state machine every writer obeys.

A stored task is a plain JSON-able dict in A2A 0.3 shape (lowercase states,
`kind`-tagged parts). Dialects translate at the web edge; the store only
ever holds this one form. The TypedDicts below name that form; they are
dicts at run time, so a task read back from JSON needs no conversion.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from functools import lru_cache
from typing import Any, Final, Literal, NotRequired, TypedDict

from shared.entropy import RandomSlices
from shared.generation import FIRST as FIRST_GENERATION
from shared.mappings import is_mapping


class TaskState(StrEnum):
    """A2A task states, spelled as stored (and as A2A 0.3 sends them)."""

    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input-required"
    AUTH_REQUIRED = "auth-required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    REJECTED = "rejected"


SUBMITTED: Final = TaskState.SUBMITTED
WORKING: Final = TaskState.WORKING
INPUT_REQUIRED: Final = TaskState.INPUT_REQUIRED
AUTH_REQUIRED: Final = TaskState.AUTH_REQUIRED
COMPLETED: Final = TaskState.COMPLETED
FAILED: Final = TaskState.FAILED
CANCELED: Final = TaskState.CANCELED
REJECTED: Final = TaskState.REJECTED

STATES: Final = frozenset(state.value for state in TaskState)
TERMINAL_STATES: Final = frozenset({COMPLETED, FAILED, CANCELED, REJECTED})
# The task stopped for the peer: a follow-up message continues it.
INTERRUPTED_STATES: Final = frozenset({INPUT_REQUIRED, AUTH_REQUIRED})
# The states of a task in the turn book's flight: published, or running.
IN_FLIGHT: Final = frozenset({SUBMITTED, WORKING})


class FileContent(TypedDict, total=False):
    """A file part's content: `bytes` (base64) or `uri`, with optional name and type."""

    bytes: str
    uri: str
    name: str
    mimeType: str


class TextPart(TypedDict):
    kind: Literal["text"]
    text: str
    metadata: NotRequired[dict[str, Any]]


class FilePart(TypedDict):
    kind: Literal["file"]
    file: FileContent
    metadata: NotRequired[dict[str, Any]]


class DataPart(TypedDict):
    kind: Literal["data"]
    data: Any  # any JSON value (A2A 1.0); 0.3 peers see objects
    metadata: NotRequired[dict[str, Any]]


Part = TextPart | FilePart | DataPart
PART_KINDS: Final = frozenset({"text", "file", "data"})


class Message(TypedDict):
    kind: Literal["message"]
    role: Literal["user", "agent"]
    messageId: str
    parts: list[Part]
    taskId: NotRequired[str]
    contextId: NotRequired[str]
    metadata: NotRequired[dict[str, Any]]
    extensions: NotRequired[list[str]]
    referenceTaskIds: NotRequired[list[str]]


class Artifact(TypedDict):
    artifactId: str
    parts: list[Part]
    name: NotRequired[str]
    description: NotRequired[str]
    metadata: NotRequired[dict[str, Any]]
    extensions: NotRequired[list[str]]


class TaskStatus(TypedDict):
    state: TaskState | str
    timestamp: NotRequired[str]
    message: NotRequired[Message]
    # Private (no wire shows it): the message repeats the task's text result,
    # word for word (`shared.dialects.status_for` reads it).
    repeatsResult: NotRequired[bool]


# The key of that mark.
REPEATS_RESULT: Final = "repeatsResult"


class Task(TypedDict):
    kind: Literal["task"]
    id: str
    contextId: str
    status: TaskStatus
    history: NotRequired[list[Message]]
    artifacts: NotRequired[list[Artifact]]
    metadata: NotRequired[dict[str, Any]]
    # Who created the task (web.auth.tokens's principal). Kept with the task so
    # any store holds it, and never shown to a peer (shared.dialects drops it).
    owner: NotRequired[str]
    # One more for every status or artifact update (shared.generation); shown
    # only to A2A 1.1 peers.
    generation: NotRequired[int]
    # Its attempt and which run may write (shared.attempts); never shown to a peer.
    run: NotRequired[dict[str, Any]]


# Which state may follow which. Terminal states have no successors: that is
# the whole "a terminal task never changes again" guarantee, enforced by
# `shared.transitions.transition` together with the stores' compare-and-set.
# working -> working is progress (a status message, an artifact or a chunk).
_NEXT: Final[Mapping[str, frozenset[str]]] = {
    SUBMITTED: frozenset({WORKING, FAILED, CANCELED, REJECTED}),
    WORKING: frozenset(
        {WORKING, INPUT_REQUIRED, AUTH_REQUIRED, COMPLETED, FAILED, CANCELED, REJECTED}
    ),
    # A follow-up message puts an interrupted task back in the queue.
    INPUT_REQUIRED: frozenset({SUBMITTED, FAILED, CANCELED}),
    AUTH_REQUIRED: frozenset({SUBMITTED, FAILED, CANCELED}),
    COMPLETED: frozenset(),
    FAILED: frozenset(),
    CANCELED: frozenset(),
    REJECTED: frozenset(),
}


def can_transition(current: str, new: str) -> bool:
    """True when the state machine lets a task in `current` move to `new`."""
    return new in _NEXT.get(current, frozenset())


def is_terminal(state: str) -> bool:
    return state in TERMINAL_STATES


def is_at_rest(state: str) -> bool:
    """Nothing happens to the task until the peer acts: terminal, or waiting for it."""
    return is_terminal(state) or state in INTERRUPTED_STATES


def state_of(task: Mapping[str, Any] | None) -> str:
    """The task's state, or "" for a task without a readable status."""
    status = task.get("status") if is_mapping(task) else None
    if is_mapping(status):
        state = status.get("state")
        if isinstance(state, str):
            return state
    return ""


def now_iso() -> str:
    """ISO-8601 UTC with microseconds, so two transitions rarely share one."""
    second, nanoseconds = divmod(time.time_ns(), 1_000_000_000)
    return f"{_date_and_time(second)}.{nanoseconds // 1000:06d}Z"


# Every transition stamps the time: the date and time of day are formatted
# once a second, the microseconds each time.
@lru_cache(maxsize=1)
def _date_and_time(second: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))


def iso_at(moment: float) -> str:
    """`now_iso`'s form of a moment in seconds since the epoch."""
    return _iso(datetime.fromtimestamp(moment, UTC))


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def epoch(timestamp: str) -> float:
    """An ISO-8601 timestamp as seconds since the epoch (0.0 if unreadable)."""
    try:
        moment = datetime.fromisoformat(timestamp)
    except (TypeError, ValueError):
        return 0.0
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


# The variant nibble of a version-4 UUID: 10xx in binary, by its two random bits.
_VARIANT_DIGITS: Final = "89ab"
_UUID_BYTES: Final = RandomSlices(16)


def new_id() -> str:
    """A random (version 4) UUID in its usual lowercase form, as
    `str(uuid.uuid4())` makes it from 16 bytes of `os.urandom`, at a fraction
    of the cost: 122 random bits, the version digit `4` and the RFC 4122
    variant, written straight from the bytes' hex."""
    raw = _UUID_BYTES.take()
    digits = raw.hex()
    variant = _VARIANT_DIGITS[raw[8] >> 4 & 3]
    return f"{digits[:8]}-{digits[8:12]}-4{digits[13:16]}-{variant}{digits[17:20]}-{digits[20:]}"


def text_part(text: str) -> TextPart:
    return {"kind": "text", "text": text}


def text_message(role: Literal["user", "agent"], text: str, **extra: Any) -> Message:
    """A message with one text part; `extra` adds e.g. taskId, contextId."""
    message: Message = {
        "kind": "message",
        "role": role,
        "messageId": new_id(),
        "parts": [text_part(text)],
    }
    message.update(extra)  # type: ignore[typeddict-item]
    return message


def agent_message(text: str, **extra: Any) -> Message:
    return text_message("agent", text, **extra)


def new_task(message: Message, context_id: str | None = None, owner: str | None = None) -> Task:
    """A fresh `submitted` task whose history starts with `message`."""
    task_id = new_id()
    context = context_id or new_id()
    first: Message = {**message, "taskId": task_id, "contextId": context}
    task: Task = {
        "kind": "task",
        "id": task_id,
        "contextId": context,
        "status": {"state": SUBMITTED, "timestamp": now_iso()},
        "history": [first],
        "metadata": {},
        "generation": FIRST_GENERATION,
    }
    if owner is not None:
        task["owner"] = owner
    return task


def latest_user_message(task: Mapping[str, Any]) -> Message | None:
    """The newest user message in the history, if any."""
    for message in reversed(task.get("history") or []):
        if is_mapping(message) and message.get("role") == "user":
            return message  # type: ignore[return-value]
    return None


def message_text(message: Mapping[str, Any]) -> str:
    """All text parts of a message, joined by newlines."""
    texts = [
        part["text"]
        for part in message.get("parts") or []
        if is_mapping(part) and isinstance(part.get("text"), str)
    ]
    return "\n".join(texts)
