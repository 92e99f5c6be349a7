"""Shortcuts the tests take that the shipped code has no use for: a task in a
given state, the text a task was last asked, a store's push state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.push.contract import PushStore
from shared.store.contract import Store
from shared.task import (
    STATES,
    Message,
    Task,
    TaskStatus,
    latest_user_message,
    message_text,
    now_iso,
)


def with_status(
    task: Task,
    state: str,
    *,
    message: Message | None = None,
    timestamp: str | None = None,
) -> Task:
    """A copy of `task` in `state`, with `message` as `status.message`."""
    if state not in STATES:
        raise ValueError(f"unknown task state {state!r}")
    status: TaskStatus = {"state": state, "timestamp": timestamp or now_iso()}
    if message is not None:
        status["message"] = message
    return {**task, "status": status}


def latest_user_text(task: Mapping[str, Any]) -> str:
    """The text of the newest user message in the history ("" if none)."""
    message = latest_user_message(task)
    return message_text(message) if message is not None else ""


def push_store(store: Store, ttl: float | None = None) -> PushStore | None:
    """The push state beside `store`'s tasks (`Store.push_store`); None for a
    store that keeps none, which then serves no push notifications. `ttl`
    (the task TTL the store was opened with): how long a finished, delivered
    task's push state is kept, so it goes when the task does."""
    return store.push_store(ttl)
