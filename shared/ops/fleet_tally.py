"""The fleet's tally: what every worker adds up in one small document of the
store, so that any front end reads the whole fleet's figures in one read.

A worker's Prometheus metrics live on its own port, and a front end knows
neither the workers' ports nor their number. The console's fleet dashboard
needs fleet-wide figures from wherever it is served, so every process that
runs tasks also adds what it saw to the document `fleet:tally`
(`shared.documents`), a few seconds at a time:

- `outcomes`: how many runs ended in each A2A state, counted for good (a
  total that only grows; a reader takes the rate from two reads);
- `latency`: how many of them took how long from send to outcome, as counts
  per bucket of `BUCKETS` (the last counts what took longer than all);
- `workers`: each live worker's slots and when it last said so; one not
  heard from for `LAPSE` seconds is dropped at the next write.

A process counts in memory (`Tally.count`, no I/O) and a daemon thread adds
its counts to the document every `EVERY` seconds with `step`, so a run
costs the store nothing; the counts of the last few seconds of a process
that dies before its next write are lost. With a store that keeps no small
documents (a user's two-method store; `abilities_of(store).documents` is
None), nothing is counted.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared.documents import Documents, step

log = logging.getLogger(__name__)

NAME: Final = "fleet:tally"
# Seconds between a process's writes of its counts and its worker entry.
EVERY: Final = 2.0
# A worker not heard from for this long is no longer counted as live.
LAPSE: Final = 15.0
# Upper bounds (seconds) of the latency buckets; one more counts the rest.
BUCKETS: Final = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(frozen=True)
class WorkerSlots:
    slots: int
    seen: float  # the store's clock when the worker last said so


@dataclass(frozen=True)
class FleetTotals:
    """The tally as read: totals for good, and the live workers."""

    outcomes: Mapping[str, int]
    latency: tuple[int, ...]  # counts per bucket of BUCKETS, and the rest
    workers: Mapping[str, WorkerSlots]
    now: float  # the store's clock at the read


def read_tally(documents: Documents) -> FleetTotals:
    """The tally now (all zero before any worker wrote)."""
    found = documents.document(NAME)
    value = found.value if isinstance(found.value, dict) else {}
    workers = {
        name: WorkerSlots(int(entry["slots"]), float(entry["seen"]))
        for name, entry in _mapping(value.get("workers")).items()
        if float(entry.get("seen", 0)) >= found.now - LAPSE
    }
    return FleetTotals(
        outcomes={str(k): int(v) for k, v in _mapping(value.get("outcomes")).items()},
        latency=_buckets(value.get("latency")),
        workers=workers,
        now=found.now,
    )


class Tally:
    """One process's counts not yet added to the document."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._outcomes: dict[str, int] = {}
        self._latency = [0] * (len(BUCKETS) + 1)
        self._documents: Documents | None = None
        self._pid = -1

    def count(self, documents: Documents, outcome: str, latency: float | None) -> None:
        """One run ended in `outcome`, `latency` seconds after it was sent
        (None: unknown); added to the document within `EVERY` seconds."""
        with self._lock:
            if self._pid != os.getpid():  # the first count here, or a forked child's
                self._pid, self._documents = os.getpid(), documents
                self._outcomes, self._latency = {}, [0] * (len(BUCKETS) + 1)
                threading.Thread(target=self._loop, name="toolnexus-tally", daemon=True).start()
            self._outcomes[outcome] = self._outcomes.get(outcome, 0) + 1
            if latency is not None:
                self._latency[bisect.bisect_left(BUCKETS, max(0.0, latency))] += 1

    def flush(self) -> None:
        """Add the counts so far to the document (kept for the next try when
        the store cannot take them)."""
        with self._lock:
            documents, outcomes, latency = self._documents, self._outcomes, self._latency
            self._outcomes, self._latency = {}, [0] * (len(BUCKETS) + 1)
        if documents is None or not outcomes:
            return
        try:
            step(documents, NAME, lambda value, now: (_added(value, outcomes, latency), None, None))
        except Exception as error:  # the store down: kept, tried again
            log.debug("fleet tally: could not add the counts: %s", error)
            with self._lock:
                for outcome, n in outcomes.items():
                    self._outcomes[outcome] = self._outcomes.get(outcome, 0) + n
                self._latency = [a + b for a, b in zip(self._latency, latency, strict=True)]

    def _loop(self) -> None:
        pid = os.getpid()
        while pid == os.getpid():
            time.sleep(EVERY)
            self.flush()


_tally = Tally()


def count_outcome(documents: Documents, outcome: str, latency: float | None) -> None:
    """Count a run's outcome in this process's tally (see the module's doc)."""
    _tally.count(documents, outcome, latency)


def flush_tally() -> None:
    """Add this process's counts to the document now (at a worker's exit, in tests)."""
    _tally.flush()


class WorkerPresence:
    """Keeps one worker's entry (its slots) in the tally while it runs,
    written every `EVERY` seconds; removed when stopped, dropped by readers
    `LAPSE` seconds after the worker died."""

    def __init__(self, documents: Documents, worker: str, slots: int) -> None:
        self._documents = documents
        self._worker = worker
        self._slots = slots
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="toolnexus-presence", daemon=True)

    def start(self) -> WorkerPresence:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=EVERY + 1)
        try:
            step(self._documents, NAME, self._absent)
        except Exception as error:  # it lapses by itself
            log.debug("fleet tally: could not remove %s: %s", self._worker, error)

    def _loop(self) -> None:
        while True:
            try:
                step(self._documents, NAME, self._present)
            except Exception as error:  # the store down: said again soon
                log.debug("fleet tally: could not write %s's slots: %s", self._worker, error)
            if self._stop.wait(EVERY):
                return

    def _absent(self, value: Any, now: float) -> tuple[Any, None, None]:
        return _without(value, self._worker), None, None

    def _present(self, value: Any, now: float) -> tuple[Any, None, None]:
        changed = _copy(value)
        workers = {
            name: entry
            for name, entry in changed["workers"].items()
            if float(entry.get("seen", 0)) >= now - LAPSE
        }
        workers[self._worker] = {"slots": self._slots, "seen": now}
        changed["workers"] = workers
        return changed, None, None


def _added(value: Any, outcomes: Mapping[str, int], latency: list[int]) -> dict[str, Any]:
    changed = _copy(value)
    for outcome, n in outcomes.items():
        changed["outcomes"][outcome] = int(changed["outcomes"].get(outcome, 0)) + n
    changed["latency"] = [a + b for a, b in zip(changed["latency"], latency, strict=True)]
    return changed


def _without(value: Any, worker: str) -> Any:
    if not isinstance(value, dict) or worker not in _mapping(value.get("workers")):
        return value  # the same object: nothing to write
    changed = _copy(value)
    del changed["workers"][worker]
    return changed


def _copy(value: Any) -> dict[str, Any]:
    """A fresh value to change, whatever was stored (nothing, or an older shape)."""
    stored = value if isinstance(value, dict) else {}
    return {
        "outcomes": dict(_mapping(stored.get("outcomes"))),
        "latency": list(_buckets(stored.get("latency"))),
        "workers": {k: dict(v) for k, v in _mapping(stored.get("workers")).items()},
    }


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _buckets(value: Any) -> tuple[int, ...]:
    width = len(BUCKETS) + 1
    if isinstance(value, list) and len(value) == width:
        return tuple(int(n) for n in value)
    return (0,) * width
