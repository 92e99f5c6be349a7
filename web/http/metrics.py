"""The web tier's Prometheus metrics, made on first use (see shared.ops.metrics).

The request metrics' series are looked up once per label set
(`requests_counted`, `latency_of`): `labels()` checks its arguments and
takes a lock on every call, which every request would pay twice. Label
sets are few (the JSON-RPC methods, the routes, the outcomes), and
prometheus_client keeps each series for good anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from prometheus_client import Counter, Gauge, Histogram

from shared.ops.metrics import LATENCY_BUCKETS


@dataclass(frozen=True)
class WebMetrics:
    requests: Counter
    latency: Histogram
    tasks_queued: Counter
    streams_open: Gauge


@cache
def web_metrics() -> WebMetrics:
    return WebMetrics(
        requests=Counter(
            "toolnexus_requests",
            "HTTP requests by JSON-RPC method (or HTTP method and route) and outcome"
            " (ok, a JSON-RPC error code, or the HTTP status)",
            ["method", "outcome"],
        ),
        latency=Histogram(
            "toolnexus_request_duration_seconds",
            "Time to answer a request, by method; for a stream, until it closed",
            ["method"],
            buckets=LATENCY_BUCKETS,
        ),
        tasks_queued=Counter(
            "toolnexus_tasks_queued",
            "Submissions handed to the workers: new tasks and follow-ups to input-required ones",
        ),
        streams_open=Gauge(
            "toolnexus_streams_open",
            "Event streams (SendStreamingMessage, SubscribeToTask) open now",
            multiprocess_mode="livesum",
        ),
    )


@cache
def requests_counted(method: str, outcome: str) -> Counter:
    """The series of `toolnexus_requests` for this method and outcome."""
    return web_metrics().requests.labels(method, outcome)


@cache
def latency_of(method: str) -> Histogram:
    """The series of `toolnexus_request_duration_seconds` for this method."""
    return web_metrics().latency.labels(method)


def count_queued() -> None:
    """One more submission handed to the workers (the dispatcher calls it)."""
    web_metrics().tasks_queued.inc()
