"""The task store's node metrics, made on first use (see shared.ops.metrics):
failovers a process followed, and writes that missed their replicas."""

from __future__ import annotations

from functools import cache

from prometheus_client import Counter


@cache
def _failovers() -> Counter:
    return Counter(
        "toolnexus_store_failovers",
        "Times this process found the store's primary moved to another node (a Sentinel"
        " failover, a promoted PostgreSQL standby)",
        ["store"],
    )


@cache
def _unreplicated() -> Counter:
    return Counter(
        "toolnexus_store_unreplicated_writes",
        "Writes the primary took but too few replicas confirmed in time"
        " (TOOLNEXUS_REDIS_MIN_REPLICAS), reported to the caller as a store error",
        ["store"],
    )


def count_failover(store: str) -> None:
    _failovers().labels(store).inc()


def count_unreplicated(store: str) -> None:
    _unreplicated().labels(store).inc()
