"""The broker's backlog as Prometheus gauges, read when a scrape asks.

The figures are the broker's, not the process's (shared.broker.backlog), so
they are made at scrape time instead of being counted: every front end
reports the same fleet-wide values (an autoscaler takes their max). When
the broker cannot say, the scrape still answers, with
`toolnexus_queue_backlog_up` 0 and no depth that could be stale.

With turns (shared.owners.turns) a task first waits in the store's turn
book, not on the broker: the fulfilment queue's depth and oldest age count
those held tasks too, so an autoscaler sees all the work waiting, and
`toolnexus_tasks_held` and `toolnexus_turn_slots` tell the two apart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from shared.broker.backlog import Backlog, BacklogSource
from shared.errors import BrokerError, StoreError
from shared.owners.book import BookView, TurnBook

log = logging.getLogger(__name__)


class BacklogCollector(Collector):
    def __init__(
        self, source: BacklogSource, book: TurnBook | None = None, queue: str | None = None
    ) -> None:
        self._source = source
        self._book = book
        self._queue = queue

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "toolnexus_queue_backlog_up",
            "1 when the broker answered the read of its queues' backlog, 0 when it could not",
        )
        try:
            backlogs = self._source.backlog()
        except BrokerError as error:
            log.warning("metrics: the queues' backlog is unknown: %s", error)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        view = self._held()
        if view is not None:
            yield from _turn_gauges(view)
        depth = GaugeMetricFamily(
            "toolnexus_queue_depth",
            "Messages waiting in the queue that no worker has taken yet",
            labels=["queue"],
        )
        age = GaugeMetricFamily(
            "toolnexus_queue_oldest_age_seconds",
            "Seconds the oldest message waiting in the queue has waited (0 when none waits;"
            " absent where the broker does not show it, as RabbitMQ)",
            labels=["queue"],
        )
        for backlog in backlogs:
            held = view if backlog.queue == self._queue else None
            waiting, oldest = with_held(backlog, held)
            depth.add_metric([backlog.queue], waiting)
            if oldest is not None:
                age.add_metric([backlog.queue], oldest)
            elif waiting == 0:
                age.add_metric([backlog.queue], 0.0)
        yield depth
        yield age

    def _held(self) -> BookView | None:
        if self._book is None:
            return None
        try:
            return self._book.view()
        except StoreError as error:
            log.warning("metrics: the turn book is unknown: %s", error)
            return None


def with_held(backlog: Backlog, view: BookView | None) -> tuple[int, float | None]:
    """A queue's depth and oldest age counting the tasks the turn book
    `view` holds for it (None: none), as every reader of the backlog counts them."""
    waiting, oldest = backlog.depth, backlog.oldest_age
    if view is not None:
        waiting += view.held
        if view.oldest_held is not None:
            held_for = max(0.0, time.time() - view.oldest_held)
            oldest = held_for if oldest is None else max(oldest, held_for)
    return waiting, oldest


def _turn_gauges(view: BookView) -> Iterator[Metric]:
    held = GaugeMetricFamily(
        "toolnexus_tasks_held",
        "Tasks accepted and waiting in the turn book for their owner's turn (not yet on the"
        " broker)",
    )
    held.add_metric([], view.held)
    flying = GaugeMetricFamily(
        "toolnexus_tasks_in_flight",
        "Tasks taken from the turn book: on the broker or running",
    )
    flying.add_metric([], sum(count.in_flight for count in view.owners.values()))
    slots = GaugeMetricFamily(
        "toolnexus_turn_slots",
        "Slots of the live workers registered in the turn book (their concurrency)",
    )
    slots.add_metric([], view.capacity)
    yield from (held, flying, slots)
