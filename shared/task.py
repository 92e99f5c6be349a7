"""The stored task shape and the one state machine every writer obeys.

A stored task is a plain JSON-able dict in A2A 0.3 shape (lowercase states,
`kind`-tagged parts). Dialects translate at the web edge; the store only
ever holds this one form.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

Task = dict[str, Any]
Message = dict[str, Any]

SUBMITTED: Final = "submitted"
WORKING: Final = "working"
INPUT_REQUIRED: Final = "input-required"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELED: Final = "canceled"
REJECTED: Final = "rejected"

STATES: Final = frozenset(
    {SUBMITTED, WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELED, REJECTED}
)
TERMINAL_STATES: Final = frozenset({COMPLETED, FAILED, CANCELED, REJECTED})

# Which state may follow which. Terminal states have no successors: that is
# the whole "a terminal task never changes again" guarantee, enforced by
# `shared.transitions.transition` together with the stores' compare-and-set.
_NEXT: Final[Mapping[str, frozenset[str]]] = {
    SUBMITTED: frozenset({WORKING, FAILED, CANCELED, REJECTED}),
    WORKING: frozenset({WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELED}),
    # A follow-up message puts an input-required task back in the queue.
    INPUT_REQUIRED: frozenset({SUBMITTED, FAILED, CANCELED}),
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


def state_of(task: Mapping[str, Any]) -> str:
    """The task's state, or "" for a task without a readable status."""
    status = task.get("status")
    if isinstance(status, Mapping):
        state = status.get("state")
        if isinstance(state, str):
            return state
    return ""


def now_iso() -> str:
    """ISO-8601 UTC with microseconds, so two transitions rarely share one."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def new_id() -> str:
    return str(uuid.uuid4())


def text_message(role: str, text: str, **extra: Any) -> Message:
    """A message with one text part; `extra` adds e.g. taskId, contextId."""
    return {
        "kind": "message",
        "role": role,
        "messageId": new_id(),
        "parts": [{"kind": "text", "text": text}],
        **extra,
    }


def agent_message(text: str, **extra: Any) -> Message:
    return text_message("agent", text, **extra)


def text_artifact(text: str, name: str = "result") -> dict[str, Any]:
    return {
        "artifactId": new_id(),
        "name": name,
        "parts": [{"kind": "text", "text": text}],
    }


def new_task(message: Message, context_id: str | None = None) -> Task:
    """A fresh `submitted` task whose history starts with `message`."""
    task_id = new_id()
    context = context_id or new_id()
    first = {**message, "taskId": task_id, "contextId": context}
    return {
        "kind": "task",
        "id": task_id,
        "contextId": context,
        "status": {"state": SUBMITTED, "timestamp": now_iso()},
        "history": [first],
        "metadata": {},
    }


def with_status(
    task: Task,
    state: str,
    *,
    message: Message | None = None,
    timestamp: str | None = None,
) -> Task:
    """A copy of `task` in `state`; `message` goes into `status.message`.

    Only failed and input-required tasks carry a status message; entering
    another state drops any earlier one, so the stored shape stays exact.
    """
    if state not in STATES:
        raise ValueError(f"unknown task state {state!r}")
    status: dict[str, Any] = {"state": state, "timestamp": timestamp or now_iso()}
    if message is not None:
        status["message"] = message
    return {**task, "status": status}


def latest_user_text(task: Mapping[str, Any]) -> str:
    """The text of the newest user message in the history ("" if none)."""
    for message in reversed(task.get("history") or []):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return message_text(message)
    return ""


def message_text(message: Mapping[str, Any]) -> str:
    """All text parts of a message, joined by newlines."""
    texts = [
        part["text"]
        for part in message.get("parts") or []
        if isinstance(part, Mapping) and isinstance(part.get("text"), str)
    ]
    return "\n".join(texts)
