"""The event log's Prometheus metrics, made on first use (see shared.metrics)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from prometheus_client import Counter


@dataclass(frozen=True)
class EventMetrics:
    gaps: Counter


@cache
def event_metrics() -> EventMetrics:
    return EventMetrics(
        gaps=Counter(
            "toolnexus_event_gaps",
            "Readers (stream, resume, wait) that asked for events the log no longer held"
            " and were given the Task as it stands instead",
            ["reader"],
        ),
    )


@cache
def gaps_of(reader: str) -> Counter:
    """The series of `toolnexus_event_gaps` for this kind of reader."""
    return event_metrics().gaps.labels(reader)
