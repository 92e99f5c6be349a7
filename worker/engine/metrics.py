"""The workers' and the reaper's Prometheus metrics, made on first use (see shared.ops.metrics)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from prometheus_client import Counter, Gauge, Histogram

from shared.ops.metrics import RUN_BUCKETS


@dataclass(frozen=True)
class WorkerMetrics:
    fulfilments: Counter
    fulfilment_seconds: Histogram
    reaped: Counter
    resent: Counter
    unanswered: Counter
    io_calls: Gauge
    loop_lag: Gauge
    running: Gauge
    capacity: Gauge


@cache
def worker_metrics() -> WorkerMetrics:
    return WorkerMetrics(
        fulfilments=Counter(
            "toolnexus_fulfilments",
            "Runs of the fulfilment function, by the A2A state they left the task in",
            ["outcome"],
        ),
        fulfilment_seconds=Histogram(
            "toolnexus_fulfilment_duration_seconds",
            "Time from claiming a task to saving its outcome, by that outcome",
            ["outcome"],
            buckets=RUN_BUCKETS,
        ),
        reaped=Counter(
            "toolnexus_reaped",
            "Working tasks the reaper failed because their heartbeat stopped",
        ),
        resent=Counter(
            "toolnexus_resent",
            "Submitted tasks the reaper sent to the queue again",
        ),
        unanswered=Counter(
            "toolnexus_unanswered",
            "Tasks the reaper failed because they waited for input past TOOLNEXUS_INPUT_TIMEOUT",
        ),
        # The I/O modes (worker.engine.io_calls): one process runs many I/O calls.
        # toolnexus_io_calls was called toolnexus_calls_held before.
        io_calls=Gauge(
            "toolnexus_io_calls",
            "I/O calls a worker process runs now (TOOLNEXUS_POOL=threads|asyncio)",
            multiprocess_mode="livesum",
        ),
        loop_lag=Gauge(
            "toolnexus_event_loop_lag_seconds",
            "How late the worker's event loop last woke a sleeper: an agent blocking it",
            multiprocess_mode="livemax",
        ),
        running=Gauge(
            "toolnexus_tasks_running",
            "Agent calls running now, in all of a worker's processes",
            multiprocess_mode="livesum",
        ),
        capacity=Gauge(
            "toolnexus_worker_capacity",
            "Agent calls a worker runs at once (its pool's concurrency)",
            multiprocess_mode="livesum",
        ),
    )


@cache
def outcome_of(state: str) -> tuple[Counter, Histogram]:
    """The series of `toolnexus_fulfilments` and `toolnexus_fulfilment_duration_seconds`
    for the outcome `state`, looked up once (as `web.http.metrics` does)."""
    metrics = worker_metrics()
    return metrics.fulfilments.labels(state), metrics.fulfilment_seconds.labels(state)
