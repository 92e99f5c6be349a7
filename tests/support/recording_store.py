"""A store wrapper that records every state it wrote, in order, per task."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shared.events import StatusUpdate
from shared.store.contract import Commit, Created, Outcome, Record
from shared.task import Task, state_of
from shared.transitions import claim_by_commit


class RecordingStore:
    """Delegates to `inner` (a built-in store: an event store with the time
    indexes) and records each successful write, so a test sees the exact
    sequence of saved states, and how many events each write appended."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._write_lock = threading.RLock()
        self._states: dict[str, list[str]] = {}
        self.commits: dict[str, list[Commit]] = {}

    # Writes and their records happen under one lock that reads also take,
    # so no reader can see a state that is not recorded yet.

    def get(self, task_id: str) -> Task | None:
        with self._write_lock:
            return self.inner.get(task_id)  # type: ignore[no-any-return]

    def read(self, task_id: str) -> Record | None:
        with self._write_lock:
            return self.inner.read(task_id)  # type: ignore[no-any-return]

    def save(self, task: Task) -> Task:
        with self._write_lock:
            saved = self.inner.save(task)
            self._record(task)
        return saved  # type: ignore[no-any-return]

    def create(
        self, task: Task, message_key: str | None = None, supersedes: str | None = None
    ) -> Created:
        with self._write_lock:
            created: Created = self.inner.create(task, message_key, supersedes)
            if created.created:
                self._record(task)
        return created

    def commit(self, commit: Commit) -> bool:
        with self._write_lock:
            written = bool(self.inner.commit(commit))
            if written:
                self._record(commit.task)
                with self._lock:
                    self.commits.setdefault(commit.task["id"], []).append(commit)
        return written

    def events(self, task_id: str, after: int, limit: int | None = None) -> Any:
        return self.inner.events(task_id, after, limit)

    @contextmanager
    def watch(self, task_id: str) -> Iterator[Any]:
        with self.inner.watch(task_id) as waiter:
            yield waiter

    def stale(self, cutoff: float) -> list[str]:
        return self.inner.stale(cutoff)  # type: ignore[no-any-return]

    def all(self) -> dict[str, Task]:
        return self.inner.all()  # type: ignore[no-any-return]

    def claim(self, task_id: str, from_state: str, event: StatusUpdate) -> Outcome:
        # Through this store's own commit, so the claim is recorded too.
        return claim_by_commit(self, task_id, from_state, event)

    def __getattr__(self, name: str) -> Any:
        # The rest of the contract is the inner store's.
        return getattr(self.inner, name)

    def states(self, task_id: str) -> list[str]:
        with self._lock:
            return list(self._states.get(task_id, []))

    def _record(self, task: Task) -> None:
        with self._lock:
            self._states.setdefault(task["id"], []).append(state_of(task))
