"""TOOLNEXUS_POOL: how one worker process runs its agent calls.

- `prefork` (the default): Celery's prefork pool, one call per pool
  process; Celery's own time limits, a cancel kills the pool process
  running the call (`revoke(terminate=True)`). For CPU-bound agents.
- `threads` and `asyncio`: Celery's thread pool in one process carries
  TOOLNEXUS_CONCURRENCY messages at once (prefetch stays one per call),
  and each call is an I/O call (`worker.engine.io_calls`), its time limit
  and its cancel kept by the worker. A blocking agent's delivery runs on a pool
  thread, as in Celery's thread pool. An async agent's delivery (Celery's
  tracer, the claim, the saves, the acknowledgement) runs as a green job on
  the process's event loop (`worker.engine.green_jobs`), so a waiting call
  holds no OS thread. For agents that wait. The two names choose the same
  machinery today; they say which kind of agent a deployment runs
  (docs/io-workers.md).

The store's connection pool grows with the I/O calls, so a thousand calls
finishing together do not queue for 64 connections.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable
from typing import Any, Final

from celery.concurrency.base import apply_target
from celery.concurrency.thread import ApplyResult, TaskPool

from shared.settings import Settings
from shared.store.spec import POOL_SIZE
from worker.engine.green_jobs import start
from worker.engine.io_calls import calls_loop, io_call_count

log = logging.getLogger(__name__)

IO_POOLS: Final = frozenset({"threads", "asyncio"})
# I/O calls one process runs at once when TOOLNEXUS_CONCURRENCY is unset.
DEFAULT_IO_CONCURRENCY: Final = 100
# Store connections beyond one per I/O call: heartbeats, the loop's checks.
SPARE_CONNECTIONS: Final = 8
# Celery loads this class by name for the I/O modes (worker_pool).
IO_POOL_CLASS: Final = "worker.runtime.pools:IOPool"
# A task whose deliveries may run as green jobs carries this attribute: a
# function saying whether they do (its process's agent is async).
ON_LOOP: Final = "toolnexus_runs_on_loop"


def run_on_loop(task: Any, when: Callable[[], bool]) -> None:
    """Let `task`'s deliveries run as green jobs in an I/O pool when `when()`."""
    setattr(task, ON_LOOP, when)


def uses_io_pool(settings: Settings) -> bool:
    """True in the I/O modes, where one process runs many I/O calls."""
    return settings.pool in IO_POOLS


def celery_pool(settings: Settings) -> str:
    return IO_POOL_CLASS if uses_io_pool(settings) else "prefork"


def concurrency(settings: Settings) -> int | None:
    """Celery's worker_concurrency: calls at once (None: Celery's default, the CPU count)."""
    if settings.concurrency is not None:
        return settings.concurrency
    return DEFAULT_IO_CONCURRENCY if uses_io_pool(settings) else None


def store_connections(settings: Settings) -> int | None:
    """The Redis pool size a worker process needs (None: the store's default)."""
    calls = concurrency(settings)
    if not uses_io_pool(settings) or calls is None:
        return None
    return max(POOL_SIZE, calls + SPARE_CONNECTIONS)


class IOPool(TaskPool):  # type: ignore[misc]
    """Celery's thread pool, whose async agents' deliveries run as green jobs
    on the event loop, telling Flower how many I/O calls it runs.

    A revoke with terminate=True (what CancelTask sends) cannot kill a
    thread; it needs not: the call's watch has already seen the task leave
    `working` and stopped it (worker.engine.io_calls)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._jobs_lock = threading.Lock()
        self._jobs: set[concurrent.futures.Future[Any]] = set()

    # Celery's thread pool hands each message's tracer to `apply_target` on
    # a thread of its executor; a green job runs that same call on the loop.
    def on_apply(
        self,
        target: Callable[..., Any],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
        callback: Callable[..., Any] | None = None,
        accept_callback: Callable[..., Any] | None = None,
        **options: Any,
    ) -> Any:
        if not self._runs_on_loop(args):
            return super().on_apply(target, args, kwargs, callback, accept_callback, **options)
        job = start(calls_loop(), apply_target, target, args, kwargs, callback, accept_callback)
        with self._jobs_lock:
            self._jobs.add(job)
        job.add_done_callback(self._ended)
        return ApplyResult(job)

    def _runs_on_loop(self, args: tuple[Any, ...] | None) -> bool:
        # The tracer's first argument is the task's name (Celery's Request).
        task = self.app.tasks.get(args[0]) if args and self.app is not None else None
        when = getattr(task, ON_LOOP, None)
        return bool(when is not None and when())

    def _ended(self, job: concurrent.futures.Future[Any]) -> None:
        with self._jobs_lock:
            self._jobs.discard(job)
        if not job.cancelled() and (error := job.exception()) is not None:
            # Celery's tracer catches what a task raises: this is the tracer's own.
            log.error("a delivery on the loop failed: %r", error, exc_info=error)

    def on_stop(self) -> None:
        # Warm shutdown: the consumer has stopped taking messages; the I/O
        # calls on the loop finish (or meet their time limit) before the pool
        # stops, as the pool's threads do.
        with self._jobs_lock:
            jobs = list(self._jobs)
        concurrent.futures.wait(jobs)
        super().on_stop()

    def terminate_job(self, pid: Any, signal: Any = None) -> None:
        log.debug("terminate request for an I/O call: its watch stops it")

    # Celery's BasePool.info calls _get_info for the pool's part of `inspect
    # stats` (Flower's worker page); tests/test_worker_pools.py fails by name
    # if that moves.
    def _get_info(self) -> dict[str, Any]:
        info: dict[str, Any] = super()._get_info()
        info["toolnexus-io-calls"] = io_call_count()
        return info
