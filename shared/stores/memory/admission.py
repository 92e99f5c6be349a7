"""The send ledger in this process's memory, beside its tasks (see
`shared.owners.admission`): each owner's bucket and active ids, under one
lock, by the store's clock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Final

from shared.store.contract import Record

# A bucket holding this much less than a whole token holds one (float error).
EPSILON: Final = 1e-9


class MemoryLedger:
    def __init__(
        self,
        named: Callable[[str], str | None],
        read: Callable[[str], Record | None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`named`: the task id the store's record of a message key holds;
        `read`: the store's read, to tell whether that task is still kept."""
        self._named = named
        self._read = read
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # owner -> (tokens, when)
        self._active: dict[str, dict[str, float]] = {}  # owner -> {task id: reserved at}

    def take(self, owner: str, rate: float, size: int) -> float:
        with self._lock:
            now = self._clock()
            tokens, then = self._buckets.get(owner, (float(size), now))
            tokens = min(float(size), tokens + max(0.0, now - then) * rate)
            if tokens < 1 - EPSILON:
                return (1 - tokens) / rate
            self._buckets[owner] = (max(0.0, tokens - 1), max(then, now))
            return 0.0

    def reserve(self, owner: str, task_id: str, cap: int) -> Mapping[str, float] | None:
        with self._lock:
            now = self._clock()
            held = self._active.setdefault(owner, {})
            if task_id in held or len(held) < cap:
                held.setdefault(task_id, now)
                return None
            return {held_id: now - since for held_id, since in held.items()}

    def release(self, owner: str, *task_ids: str) -> None:
        with self._lock:
            held = self._active.get(owner)
            if held is None:
                return
            for task_id in task_ids:
                held.pop(task_id, None)
            if not held:
                del self._active[owner]

    def accepted(self, message_key: str) -> str | None:
        task_id = self._named(message_key)
        return task_id if task_id is not None and self._read(task_id) is not None else None
