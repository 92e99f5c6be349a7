"""The broker's backlog as Prometheus gauges, read when a scrape asks.

The figures are the broker's, not the process's (shared.broker.backlog), so
they are made at scrape time instead of being counted: every front end
reports the same fleet-wide values (an autoscaler takes their max). When
the broker cannot say, the scrape still answers, with
`toolnexus_queue_backlog_up` 0 and no depth that could be stale.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from shared.broker.backlog import BacklogSource
from shared.errors import BrokerError

log = logging.getLogger(__name__)


class BacklogCollector(Collector):
    def __init__(self, source: BacklogSource) -> None:
        self._source = source

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
            depth.add_metric([backlog.queue], backlog.depth)
            if backlog.oldest_age is not None:
                age.add_metric([backlog.queue], backlog.oldest_age)
            elif backlog.depth == 0:
                age.add_metric([backlog.queue], 0.0)
        yield depth
        yield age
