"""A clock the test moves by hand, for stores and reapers whose subject is
time: the test waits for events (a heartbeat written) and then moves the
clock, instead of racing real heartbeat threads against a real deadline."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.support.polling import wait_for


class MovableClock:
    """Starts at the real time (so timestamps stay plausible) and moves only
    when `advance` is called."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        with self._lock:
            self._now += seconds
            return self._now


def wait_for_a_beat_now(store: Any, task_id: str, clock: MovableClock) -> None:
    """Until the task's heartbeat is stamped with the clock's present reading
    (the store finds it not stale at that instant): a beat written since the
    clock last moved. Counting beats instead races the heartbeat thread: a
    beat counted, or stamped, before the clock moved is written after it, and
    the next move finds the task a whole stale_after behind."""
    now = clock()
    wait_for(
        lambda: task_id not in store.stale(now),
        timeout=30,
        what=f"a heartbeat of {task_id} stamped at the store's present",
    )
