"""Finished tasks a front end answers GetTask for from its own memory.

A task in a terminal state never changes again: the one state machine
refuses every later write, whichever process tries. So once this process
has read a finished task it can answer for it without asking the store,
until the store itself forgets the task (`TOOLNEXUS_TASK_TTL` after it
finished, counted here from the task's own status timestamp, and never
longer than a TTL from now). Each process keeps its own; nothing is shared.

Only terminal tasks. A running task changes in another process, and the
notice of a change reaches this one after the change was acknowledged to
whoever made it, so an answer from what this process last heard could miss
a change that had already happened.

Each task is kept as its JSON, so the budget is what it holds (as parsed
objects a task takes several times its JSON), and every caller gets a
copy of its own. The least recently read go first, and a task larger than
a tenth of the budget is not kept at all.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

from shared.codec import decode, encode_bytes
from shared.task import Task, epoch, is_terminal, state_of


class _Kept(NamedTuple):
    task: bytes  # its JSON
    expires: float  # on the wall clock; inf: kept until pushed out


class FinishedTasks:
    def __init__(
        self, budget: int, ttl: float | None, clock: Callable[[], float] = time.time
    ) -> None:
        self.budget = budget
        self._ttl = ttl
        self._clock = clock
        self._largest = budget // 10
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._lock = threading.Lock()
        self.size = 0  # the bytes of the tasks kept now

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, task_id: str) -> Task | None:
        """The finished task, if this process has it and the store still would."""
        with self._lock:
            kept = self._kept.get(task_id)
            if kept is None:
                return None
            if kept.expires <= self._clock():
                self._drop(task_id)
                return None
            self._kept.move_to_end(task_id)
        found: Task = decode(kept.task)
        return found

    def holds(self, task_id: str) -> bool:
        """Whether `get` may answer for the task without the store."""
        with self._lock:
            return task_id in self._kept

    def keep(self, task: Task) -> None:
        """Remember `task` if it is finished and fits; anything else is ignored."""
        if not is_terminal(state_of(task)):
            return
        try:
            encoded = encode_bytes(task)
        except TypeError:  # not plain JSON (a user's store may hold anything)
            return
        # orjson's bytes keep the buffer they were written into (4 KiB at
        # least); a copy is the JSON's own size.
        raw = bytes(memoryview(encoded))
        if len(raw) > self._largest:
            return
        expires = self._expiry(task)
        with self._lock:
            if task["id"] in self._kept:
                self._drop(task["id"])
            self._kept[task["id"]] = _Kept(raw, expires)
            self.size += len(raw)
            while self.size > self.budget:
                self._drop(next(iter(self._kept)))

    def _drop(self, task_id: str) -> None:
        self.size -= len(self._kept.pop(task_id).task)

    def _expiry(self, task: Task) -> float:
        if self._ttl is None:
            return float("inf")
        now = self._clock()
        finished = _timestamp(task)
        return min(finished, now) + self._ttl if finished is not None else now + self._ttl


def _timestamp(task: Task) -> float | None:
    """When the task reached its state, from its status (None: it says not)."""
    status = task.get("status")
    stamp = status.get("timestamp") if isinstance(status, dict) else None
    return (epoch(stamp) or None) if isinstance(stamp, str) else None
