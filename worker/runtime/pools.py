"""TOOLNEXUS_POOL: how one worker process runs its agent calls.

- `prefork` (the default): Celery's prefork pool, one call per pool
  process; Celery's own time limits, a cancel kills the pool process
  running the call (`revoke(terminate=True)`). For CPU-bound agents.
- `threads` and `asyncio`: Celery's thread pool in one process carries
  TOOLNEXUS_CONCURRENCY messages at once (prefetch stays one per call),
  and `worker.engine.held_calls` holds each call: coroutines on the process's one
  event loop, blocking calls on their pool thread, time limits and cancels
  enforced by the worker. For agents that wait. The two names choose the
  same machinery today; they say which kind of agent a deployment runs
  (docs/io-workers.md).

The store's connection pool grows with the calls held, so a thousand calls
finishing together do not queue for 64 connections.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from celery.concurrency.thread import TaskPool

from shared.settings import Settings
from shared.store.spec import POOL_SIZE
from worker.engine.held_calls import held_count

log = logging.getLogger(__name__)

IO_POOLS: Final = frozenset({"threads", "asyncio"})
# Calls one process holds in an I/O mode when TOOLNEXUS_CONCURRENCY is unset.
DEFAULT_IO_CONCURRENCY: Final = 100
# Store connections beyond one per held call: heartbeats, the loop's checks.
SPARE_CONNECTIONS: Final = 8
# Celery loads this class by name for the I/O modes (worker_pool).
IO_POOL_CLASS: Final = "worker.runtime.pools:IOPool"


def holds_many(settings: Settings) -> bool:
    """True in the I/O modes, where one process holds many calls."""
    return settings.pool in IO_POOLS


def celery_pool(settings: Settings) -> str:
    return IO_POOL_CLASS if holds_many(settings) else "prefork"


def concurrency(settings: Settings) -> int | None:
    """Celery's worker_concurrency: calls at once (None: Celery's default, the CPU count)."""
    if settings.concurrency is not None:
        return settings.concurrency
    return DEFAULT_IO_CONCURRENCY if holds_many(settings) else None


def store_connections(settings: Settings) -> int | None:
    """The Redis pool size a worker process needs (None: the store's default)."""
    calls = concurrency(settings)
    if not holds_many(settings) or calls is None:
        return None
    return max(POOL_SIZE, calls + SPARE_CONNECTIONS)


class IOPool(TaskPool):  # type: ignore[misc]
    """Celery's thread pool, telling Flower how many calls it holds.

    A revoke with terminate=True (what CancelTask sends) cannot kill a
    thread; it needs not: the call's watch has already seen the task leave
    `working` and stopped it (worker.engine.held_calls)."""

    def terminate_job(self, pid: Any, signal: Any = None) -> None:
        log.debug("terminate request for a held call: its watch stops it")

    # Celery's BasePool.info calls _get_info for the pool's part of `inspect
    # stats` (Flower's worker page); tests/test_worker_pools.py fails by name
    # if that moves.
    def _get_info(self) -> dict[str, Any]:
        info: dict[str, Any] = super()._get_info()
        info["toolnexus-calls-held"] = held_count()
        return info
