"""The default store: a dict behind a lock, private to one process."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from shared.store import is_safe_id, require_safe_id, same_status
from shared.task import WORKING, Task, state_of

Clock = Callable[[], float]


class MemoryStore:
    """Thread-safe; tasks are copied in and out, so a caller mutating what it
    got back can never change the stored task behind the lock's back."""

    def __init__(self, clock: Clock = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tasks: dict[str, Task] = {}
        self._heartbeats: dict[str, float] = {}

    def get(self, task_id: str) -> Task | None:
        if not is_safe_id(task_id):
            return None
        with self._lock:
            task = self._tasks.get(task_id)
            return copy.deepcopy(task) if task is not None else None

    def save(self, task: Task) -> Task:
        task_id = require_safe_id(task.get("id"))
        stored = copy.deepcopy(task)
        with self._lock:
            self._put(task_id, stored)
        return task

    def compare_and_set(self, task: Task, expected_status: Mapping[str, Any]) -> bool:
        task_id = require_safe_id(task.get("id"))
        stored = copy.deepcopy(task)
        with self._lock:
            if not same_status(self._tasks.get(task_id), expected_status):
                return False
            self._put(task_id, stored)
            return True

    def all(self) -> dict[str, Task]:
        with self._lock:
            return copy.deepcopy(self._tasks)

    def heartbeat(self, task_id: str) -> None:
        with self._lock:
            if task_id in self._heartbeats:
                self._heartbeats[task_id] = self._clock()

    def stale(self, cutoff: float) -> list[str]:
        with self._lock:
            return [i for i, beat in self._heartbeats.items() if beat < cutoff]

    def _put(self, task_id: str, task: Task) -> None:
        self._tasks[task_id] = task
        if state_of(task) == WORKING:
            self._heartbeats[task_id] = self._clock()
        else:
            self._heartbeats.pop(task_id, None)


def memory_store(clock: Clock = time.time) -> MemoryStore:
    return MemoryStore(clock)
