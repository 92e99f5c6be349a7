"""The fleet dashboard's window: samples of the fleet's figures, taken every
few seconds and kept for the last hour in this process's memory.

A sample reads three sources, each fleet-wide, so whichever front end
takes it sees the same fleet: the broker's backlog (each queue's depth and
oldest age, `shared.broker.backlog`), the store's turn book (each owner's
held and in-flight tasks) and the store's fleet tally (runs by outcome,
their send-to-outcome latency, the live workers' slots:
`shared.ops.fleet_tally`). That is a few reads, whatever the store holds:
no sample lists tasks.

The window is this process's own. A daemon thread starts at the first
request for it (after a server's fork), samples every `interval` seconds
(TOOLNEXUS_FLEET_SAMPLE_EVERY) and stops once nobody has asked for
`WINDOW` seconds; a request that finds the newest sample older than
`FRESH` takes one at once. Each gunicorn
worker process, and each front end, keeps a window of its own, begun when
it was first asked: the same fleet, sampled at other moments.

Rates and percentiles are read from two samples in a row: the growth of
the tally's totals over the seconds between them (a total that shrank, a
tally begun again, counts as no growth).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from shared.broker.backlog import BacklogSource
from shared.documents import Documents
from shared.errors import BrokerError, StoreError
from shared.ops.fleet_tally import BUCKETS, read_tally
from shared.owners.book import OwnerCount, TurnBook
from web.http.backlog_metrics import with_held

log = logging.getLogger(__name__)

# Seconds between samples (by default: TOOLNEXUS_FLEET_SAMPLE_EVERY sets them), and
# the window the page shows.
INTERVAL: Final = 5.0
WINDOW: Final = 3600.0
# A request finding the newest sample older than this takes one at once.
FRESH: Final = 1.0


@dataclass(frozen=True)
class Sample:
    """The fleet at one moment; a part is None where its source could not say."""

    time: float
    outcomes: Mapping[str, int] | None  # runs by outcome, for good
    latency: tuple[int, ...] | None  # runs per latency bucket, for good
    depth: int | None  # tasks waiting for a worker: on the queue or held for their turn
    oldest_age: float | None  # seconds the oldest of them has waited
    owners: Mapping[str, OwnerCount] | None  # the turn book's counts (None: no turns)
    workers: Mapping[str, int] | None  # each live worker's slots


class FleetSource:
    """Where a sample's figures come from (each may be missing)."""

    def __init__(
        self,
        backlog: BacklogSource | None,
        book: TurnBook | None,
        documents: Documents | None,
        queue: str,
    ) -> None:
        self._backlog = backlog
        self._book = book
        self._documents = documents
        self._queue = queue

    def sample(self) -> Sample:
        outcomes = latency = workers = None
        if self._documents is not None:
            try:
                tally = read_tally(self._documents)
                outcomes, latency = tally.outcomes, tally.latency
                workers = {name: seen.slots for name, seen in tally.workers.items()}
            except StoreError as error:
                log.debug("fleet: the tally is unknown: %s", error)
        view = None
        if self._book is not None:
            try:
                view = self._book.view()
            except StoreError as error:
                log.debug("fleet: the turn book is unknown: %s", error)
        depth = oldest = None
        if self._backlog is not None:
            try:
                found = [b for b in self._backlog.backlog() if b.queue == self._queue]
            except BrokerError as error:
                log.debug("fleet: the queues' backlog is unknown: %s", error)
            else:
                if found:
                    depth, oldest = with_held(found[0], view)
        owners = None if view is None else view.owners
        return Sample(time.time(), outcomes, latency, depth, oldest, owners, workers)


class FleetWindow:
    """The last `window` seconds of samples, kept in this process."""

    def __init__(
        self,
        source: FleetSource,
        interval: float = INTERVAL,
        window: float = WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._interval = interval
        self._window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: deque[Sample] = deque()
        self._asked = clock()
        self._pid = -1
        self._running = False

    @property
    def interval(self) -> float:
        return self._interval

    @property
    def window(self) -> float:
        return self._window

    def since(self, after: float) -> list[tuple[Sample | None, Sample]]:
        """The samples taken after `after` (seconds since the epoch), each with
        the one before it (None for the first kept), oldest first; starts the
        sampling when it is not running, and samples now when the newest is
        older than `FRESH`."""
        self._asked = self._clock()
        self._ensure_sampling()
        newest = self._newest()
        if newest is None or time.time() - newest.time >= FRESH:
            self._take()
        with self._lock:
            kept = list(self._samples)
        pairs: list[tuple[Sample | None, Sample]] = []
        for index, sample in enumerate(kept):
            if sample.time > after:
                pairs.append((kept[index - 1] if index else None, sample))
        return pairs

    def _newest(self) -> Sample | None:
        with self._lock:
            return self._samples[-1] if self._samples else None

    def _take(self) -> None:
        sample = self._source.sample()
        with self._lock:
            if self._samples and self._samples[-1].time >= sample.time:
                return  # another request's sample is as new
            self._samples.append(sample)
            while self._samples and self._samples[0].time < sample.time - self._window:
                self._samples.popleft()

    def _ensure_sampling(self) -> None:
        with self._lock:
            if self._running and self._pid == os.getpid():
                return
            if self._pid != os.getpid():
                self._samples.clear()  # a forked child's: its parent's samples
            self._pid, self._running = os.getpid(), True
        threading.Thread(target=self._loop, name="toolnexus-fleet", daemon=True).start()

    def _loop(self) -> None:
        while True:
            time.sleep(self._interval)
            with self._lock:
                if self._clock() - self._asked > self._window:
                    self._running = False
                    return
            try:
                self._take()
            except Exception:  # never let the sampling die quietly
                log.exception("fleet: a sample failed")


def rates(before: Sample | None, after: Sample) -> dict[str, float] | None:
    """Runs per second by outcome between two samples (None: unknown)."""
    if before is None or before.outcomes is None or after.outcomes is None:
        return None
    seconds = after.time - before.time
    if seconds <= 0:
        return None
    return {
        outcome: max(0, total - before.outcomes.get(outcome, 0)) / seconds
        for outcome, total in sorted(after.outcomes.items())
    }


def percentile(before: Sample | None, after: Sample, share: float) -> float | None:
    """The send-to-outcome latency under which `share` of the runs between
    two samples fell, read from the buckets as Prometheus' histogram_quantile
    reads them (linear within a bucket; the last finite bound for the rest);
    None when no run ended between them."""
    if before is None or before.latency is None or after.latency is None:
        return None
    grown = [max(0, b - a) for a, b in zip(before.latency, after.latency, strict=True)]
    total = sum(grown)
    if total == 0:
        return None
    rank = share * total
    seen = 0
    for index, count in enumerate(grown):
        if count and seen + count >= rank:
            if index == len(BUCKETS):
                return BUCKETS[-1]
            low = BUCKETS[index - 1] if index else 0.0
            return low + (BUCKETS[index] - low) * (rank - seen) / count
        seen += count
    return BUCKETS[-1]
