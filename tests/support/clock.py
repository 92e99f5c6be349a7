"""A clock the test moves by hand, for stores and reapers whose subject is
time: the test waits for events (a heartbeat written) and then moves the
clock, instead of racing real heartbeat threads against a real deadline."""

from __future__ import annotations

import threading
import time


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
