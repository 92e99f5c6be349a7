"""Push delivery's Prometheus metrics, made on first use (see shared.ops.metrics).

No label carries a URL, a token or credentials: only outcomes and reasons."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from prometheus_client import Counter, Histogram


@dataclass(frozen=True)
class PushMetrics:
    delivered: Counter
    retries: Counter
    given_up: Counter
    post_seconds: Histogram


@cache
def push_metrics() -> PushMetrics:
    return PushMetrics(
        delivered=Counter("toolnexus_push_deliveries", "Events a webhook answered with a 2xx"),
        retries=Counter("toolnexus_push_retries", "Failed webhook attempts that will be retried"),
        given_up=Counter(
            "toolnexus_push_given_up",
            "Events given up: rejected (4xx), redirect, refused (SSRF rules) or expired"
            " (failing past TOOLNEXUS_PUSH_RETRY_FOR)",
            ["reason"],
        ),
        post_seconds=Histogram(
            "toolnexus_push_post_duration_seconds",
            "Time from starting a webhook POST to its answer (or its failure)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        ),
    )
