"""The task store contract.

A store is anything with `get` and `save`; nothing has to subclass
anything, so a user's Postgres or S3 store is two methods on any object.
The optional capabilities below are used when present (`hasattr`), and the
service still answers GetTask from a store that has none of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from shared.errors import InvalidTaskId
from shared.task import Task

# One safe file name: starts with a letter or digit (so never "." or ".."),
# no separators, no NUL, bounded. Every built-in store applies it, so a
# hostile id behaves the same whichever store is configured.
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def is_safe_id(task_id: object) -> bool:
    return isinstance(task_id, str) and _SAFE_ID.fullmatch(task_id) is not None


def require_safe_id(task_id: object) -> str:
    if not is_safe_id(task_id):
        shown = repr(task_id)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        raise InvalidTaskId(
            f"invalid task id {shown}: use 1-128 letters, digits, '.', '_' or '-',"
            " starting with a letter or digit"
        )
    assert isinstance(task_id, str)
    return task_id


@runtime_checkable
class TaskStore(Protocol):
    """The contract every store meets.

    `get` returns the saved task, or None when the id is unknown *or* the
    stored data is unreadable; it never raises for either. `save` persists
    the task under `task["id"]` and returns it; callers use the return value.
    """

    def get(self, task_id: str) -> Task | None: ...

    def save(self, task: Task) -> Task: ...


@runtime_checkable
class ListableStore(Protocol):
    """Optional: every task, for ListTasks, tests and admin views."""

    def all(self) -> dict[str, Task]: ...


@runtime_checkable
class AtomicStore(Protocol):
    """Optional: compare-and-set on the current status.

    Saves `task` only if the stored task with the same id still has
    `expected_status` (its state *and* timestamp, so an A-B-A change is
    noticed), and says whether it did. Every built-in store has it; without
    it `shared.transitions` falls back to get-check-save, which is only as
    safe as the store's own last-writer-wins.
    """

    def compare_and_set(self, task: Task, expected_status: Mapping[str, Any]) -> bool: ...


@runtime_checkable
class StaleIndex(Protocol):
    """Optional: a time index of `working` tasks, for the reaper.

    A task enters the index when it is saved in `working` (scored with the
    store's clock) and leaves it when it is saved in any other state.
    `heartbeat` refreshes the score of a task still in the index and never
    re-adds one that left. `stale(cutoff)` is a range query: the ids whose
    last heartbeat is older than `cutoff` (seconds since the epoch).
    """

    def heartbeat(self, task_id: str) -> None: ...

    def stale(self, cutoff: float) -> list[str]: ...


def same_status(stored: Mapping[str, Any] | None, expected: Mapping[str, Any]) -> bool:
    """The compare half of compare-and-set, shared by the Python stores."""
    if not isinstance(stored, Mapping):
        return False
    status = stored.get("status")
    return (
        isinstance(status, Mapping)
        and status.get("state") == expected.get("state")
        and status.get("timestamp") == expected.get("timestamp")
    )
