"""What `celery -A worker worker|beat` do at start-up besides Celery's own.

- Logging: our format (TOOLNEXUS_LOG_FORMAT) for every line; Celery's `-l`
  sets the level of Celery's and the libraries' lines, TOOLNEXUS_LOG_LEVEL
  that of ours.
- A unique node name: two workers started without `-n` on one host would
  both be `celery@<host>` (one merged node in Flower, a
  DuplicateNodenameWarning); the default becomes `worker-<pid>@<host>`.
- A start-up line naming store, broker, queue, function, pool and the
  timings, and a warning when `-P` overrides the pool TOOLNEXUS_POOL chose.
- Metrics on TOOLNEXUS_METRICS_PORT when set: a worker adds up its pool
  processes (multiprocess mode, chosen before the pool forks); beat serves
  its reaper counts.

Celery sends these signals only to the programs (`celery worker`, `celery
beat`), so an app made in code (tests, `create_celery`) is left alone.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from celery import signals
from celery.concurrency import get_implementation
from celery.utils.nodenames import default_nodename

from shared.ops.collector import start_collector
from shared.ops.logs import configure_logging
from shared.ops.metrics import (
    MULTIPROC_VARIABLE,
    remove_multiprocess_dir,
    serve_metrics,
    use_multiprocess_dir,
)
from shared.ops.startup import startup_line
from shared.settings import Settings
from worker.engine.metrics import worker_metrics
from worker.runtime.pools import celery_pool

log = logging.getLogger("worker.runtime.startup")


def unique_nodename() -> str:
    return f"worker-{os.getpid()}@{socket.gethostname()}"


def install(settings: Settings) -> None:
    """Connect the start-up hooks for the Celery programs run with these settings."""

    def setup_logging(loglevel: Any = None, **_: Any) -> None:
        configure_logging(settings, root_level=loglevel)

    capacity: list[int] = []  # the worker's concurrency, once Celery has settled it

    def name_the_node(sender: Any = None, instance: Any = None, **_: Any) -> None:
        # Only the name Celery makes up; a name given with -n is kept.
        if instance is not None and instance.hostname == default_nodename(None):
            instance.hostname = unique_nodename()

    def before_the_pool_forks(**_: Any) -> None:
        if settings.metrics_port is not None:
            use_multiprocess_dir(os.environ.get(MULTIPROC_VARIABLE))

    def worker_started(sender: Any = None, instance: Any = None, **_: Any) -> None:
        chosen = get_implementation(celery_pool(settings))
        used = getattr(instance, "pool_cls", chosen)
        if used is not chosen:
            log.warning(
                "TOOLNEXUS_POOL=%s needs the %s pool, but the command line chose %s (-P):"
                " this worker keeps the guarantees of %s on a pool they were not made for;"
                " leave -P out and let TOOLNEXUS_POOL choose",
                settings.pool,
                chosen.__name__,
                getattr(used, "__name__", used),
                settings.pool,
            )
        if isinstance(getattr(instance, "concurrency", None), int):
            capacity.append(instance.concurrency)
        extra = {
            "node": sender,
            "pool": settings.pool,
            "concurrency": getattr(instance, "concurrency", "?"),
            "metrics": _metrics_address(settings),
        }
        # Workers take no HTTP requests: no API tokens of their own.
        log.info(startup_line("worker", settings, extra, omit=("api_tokens",)))

    def worker_ready(**_: Any) -> None:
        if capacity:  # in the main process, whose gauge lives as long as the worker
            worker_metrics().capacity.set(capacity[-1])
        _serve(settings)
        # The process that runs the I/O calls on the threads and asyncio pools.
        start_collector(settings.gc_freeze_every, settings.gc_thaw_every)

    def pool_process_started(**_: Any) -> None:
        # Each prefork pool process, which runs its own call.
        start_collector(settings.gc_freeze_every, settings.gc_thaw_every)

    def stopped(**_: Any) -> None:
        remove_multiprocess_dir()

    def beat_started(**_: Any) -> None:
        extra = {"metrics": _metrics_address(settings), "schedule": settings.beat_schedule}
        # Beat runs no agent and takes no HTTP requests.
        omit = ("heartbeat", "time_limit", "api_tokens")
        log.info(startup_line("beat", settings, extra, omit=omit))
        _serve(settings)

    for signal, receiver in (
        (signals.setup_logging, setup_logging),
        (signals.celeryd_init, name_the_node),
        (signals.worker_init, before_the_pool_forks),
        (signals.celeryd_after_setup, worker_started),
        (signals.worker_ready, worker_ready),
        (signals.worker_process_init, pool_process_started),
        (signals.worker_shutdown, stopped),
        (signals.beat_init, beat_started),
    ):
        signal.connect(receiver, weak=False)


def _metrics_address(settings: Settings) -> str:
    if settings.metrics_port is None:
        return "off (set TOOLNEXUS_METRICS_PORT)"
    return f"http://{settings.host}:{settings.metrics_port}/metrics"


def _serve(settings: Settings) -> None:
    if settings.metrics_port is not None:
        serve_metrics(settings.host, settings.metrics_port)
