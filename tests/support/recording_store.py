"""A store wrapper that records every state it wrote, in order, per task."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from shared.task import Task, state_of


class RecordingStore:
    """Delegates to `inner` (which must have compare_and_set, heartbeat and
    stale, as every built-in store does) and records each successful write,
    so a test sees the exact sequence of saved transitions."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._write_lock = threading.RLock()
        self._states: dict[str, list[str]] = {}
        self.heartbeats: dict[str, int] = {}

    # Writes and their records happen under one lock that reads also take,
    # so no reader can see a state that is not recorded yet.

    def get(self, task_id: str) -> Task | None:
        with self._write_lock:
            return self.inner.get(task_id)  # type: ignore[no-any-return]

    def save(self, task: Task) -> Task:
        with self._write_lock:
            saved = self.inner.save(task)
            self._record(task)
        return saved  # type: ignore[no-any-return]

    def compare_and_set(self, task: Task, expected_status: Mapping[str, Any]) -> bool:
        with self._write_lock:
            written = bool(self.inner.compare_and_set(task, expected_status))
            if written:
                self._record(task)
        return written

    def heartbeat(self, task_id: str) -> None:
        with self._lock:
            self.heartbeats[task_id] = self.heartbeats.get(task_id, 0) + 1
        self.inner.heartbeat(task_id)

    def stale(self, cutoff: float) -> list[str]:
        return self.inner.stale(cutoff)  # type: ignore[no-any-return]

    def all(self) -> dict[str, Task]:
        return self.inner.all()  # type: ignore[no-any-return]

    def states(self, task_id: str) -> list[str]:
        with self._lock:
            return list(self._states.get(task_id, []))

    def _record(self, task: Task) -> None:
        with self._lock:
            self._states.setdefault(task["id"], []).append(state_of(task))
