"""Garbage collection for processes that hold many long-lived things.

A front end with 10,000 open streams, or a worker running 5,000 waiting I/O
calls, keeps millions of objects alive for minutes. CPython's collector
scans every one of them in each full (generation 2) collection, with the
whole process stopped: at 10,000 streams those pauses made the delivery
tail (docs/benchmark-figures.md has the figures). Most of those objects
are not garbage and will not become cyclic garbage while they live;
scanning them again and again buys nothing.

So a serving process, once started, runs a `Collector`:

- every `freeze_every` seconds, what survived so far is frozen
  (`gc.freeze()`: moved to the permanent generation, which no automatic
  collection scans; one list splice, no pause). The automatic collections go
  on for everything younger, so the cycles a request makes and drops are
  collected as CPython collects them; a full collection then scans only what
  survived since the last freeze.
- every `thaw_every` seconds the frozen objects are thawed and collected
  once (`gc.unfreeze()`, `gc.collect()`): the cycles among objects that
  lived longer than `freeze_every` (a stream that ended, a finished call)
  are reclaimed then. That one collection costs what a full one costs
  without the `Collector`; it comes once per `thaw_every`, not several
  times a minute, and is logged with what it found, so its cost and what
  waiting for it holds are seen.

`freeze_every` None leaves CPython's collector as it is (nothing runs).
`thaw_every` None never thaws: for a process whose long-lived objects are
known to die without cycles; memory kept by a cycle among frozen objects
is then never returned.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable
from typing import Final

log = logging.getLogger("shared.ops.collector")

NAME: Final = "gc-freezer"


class Collector:
    """The freeze and thaw schedule of one process (see the module's doc)."""

    def __init__(
        self,
        freeze_every: float,
        thaw_every: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._freeze_every = freeze_every
        self._thaw_every = thaw_every
        self._clock = clock
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._next_thaw = None if thaw_every is None else clock() + thaw_every

    def tick(self) -> None:
        """One step of the schedule: thaw and collect when due, then freeze."""
        if self._next_thaw is not None and self._clock() >= self._next_thaw:
            self.thaw()
            assert self._thaw_every is not None
            self._next_thaw = self._clock() + self._thaw_every
        gc.freeze()

    def thaw(self) -> int:
        """Thaw every frozen object and run one full collection: the cyclic
        garbage found among them (and what it referred to) is freed; the count found
        is returned."""
        frozen = gc.get_freeze_count()
        began = time.perf_counter()
        gc.unfreeze()
        found = gc.collect()
        took = time.perf_counter() - began
        log.info(
            "gc: thawed %d objects, a full collection found %d unreachable in %.0f ms",
            frozen,
            found,
            took * 1000,
        )
        return found

    def run(self) -> None:
        """Freeze now (what start-up loaded), then keep the schedule until stopped."""
        gc.freeze()
        while not self._stopped.wait(self._freeze_every):
            try:
                self.tick()
            except Exception:  # never let the schedule die: the process would keep
                log.exception("gc: a freeze or thaw failed")  # freezing nothing

    def start(self) -> Collector:
        self._thread = threading.Thread(target=self.run, name=NAME, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the schedule and thaw (no collection): the process's collector
        is CPython's own again, as before `start`."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
        gc.unfreeze()


def start_collector(freeze_every: float | None, thaw_every: float | None) -> Collector | None:
    """The schedule for this process, running; None when it is turned off."""
    if freeze_every is None:
        return None
    return Collector(freeze_every, thaw_every).start()
