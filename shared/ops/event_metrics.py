"""The event log's Prometheus metrics, made on first use (see shared.ops.metrics)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from prometheus_client import Counter, Gauge


@dataclass(frozen=True)
class EventMetrics:
    gaps: Counter
    store_memory: Gauge


@cache
def event_metrics() -> EventMetrics:
    return EventMetrics(
        gaps=Counter(
            "toolnexus_event_gaps",
            "Readers (stream, resume, wait, push) that asked for events the log no longer kept"
            " and were given the Task as it stands instead",
            ["reader"],
        ),
        store_memory=Gauge(
            "toolnexus_store_memory_ratio",
            "The share of its memory limit the task store uses (Redis: used_memory over"
            " maxmemory), as last seen by /readyz; absent without a limit",
            multiprocess_mode="max",
        ),
    )


@cache
def gaps_of(reader: str) -> Counter:
    """The series of `toolnexus_event_gaps` for this kind of reader."""
    return event_metrics().gaps.labels(reader)
