"""The default store: JSON text in a dict behind a lock, private to one process.

Tasks are kept serialised: what comes back is always a fresh copy, a task
that other stores could not save fails here too, and encoding is cheaper
than deep-copying the dict twice.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from shared.store import is_safe_id, require_safe_id
from shared.task import WORKING, Task, state_of

Clock = Callable[[], float]


class MemoryStore:
    def __init__(self, clock: Clock = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._tasks: dict[str, str] = {}
        self._stamps: dict[str, tuple[str, object]] = {}  # id -> (state, timestamp), for CAS
        self._heartbeats: dict[str, float] = {}

    def get(self, task_id: str) -> Task | None:
        if not is_safe_id(task_id):
            return None
        with self._lock:
            text = self._tasks.get(task_id)
        return json.loads(text) if text is not None else None

    def save(self, task: Task) -> Task:
        task_id = require_safe_id(task.get("id"))
        text = json.dumps(task)
        with self._lock:
            self._put(task_id, task, text)
        return task

    def compare_and_set(self, task: Task, expected_status: Mapping[str, Any]) -> bool:
        task_id = require_safe_id(task.get("id"))
        text = json.dumps(task)
        expected = (expected_status.get("state"), expected_status.get("timestamp"))
        with self._lock:
            if self._stamps.get(task_id) != expected:
                return False
            self._put(task_id, task, text)
            return True

    def all(self) -> dict[str, Task]:
        with self._lock:
            texts = dict(self._tasks)
        return {task_id: json.loads(text) for task_id, text in texts.items()}

    def heartbeat(self, task_id: str) -> None:
        with self._lock:
            if task_id in self._heartbeats:
                self._heartbeats[task_id] = self._clock()

    def stale(self, cutoff: float) -> list[str]:
        with self._lock:
            return [i for i, beat in self._heartbeats.items() if beat < cutoff]

    def _put(self, task_id: str, task: Task, text: str) -> None:
        state = state_of(task)
        self._tasks[task_id] = text
        self._stamps[task_id] = (state, task["status"].get("timestamp") if state else None)
        if state == WORKING:
            self._heartbeats[task_id] = self._clock()
        else:
            self._heartbeats.pop(task_id, None)


def memory_store(clock: Clock = time.time) -> MemoryStore:
    return MemoryStore(clock)
