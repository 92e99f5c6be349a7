"""Prometheus plumbing shared by the web tier, the Celery workers and beat.

A parent that forks processes which all count (gunicorn's master, a Celery
worker's main process) calls `use_multiprocess_dir` before forking; every
child then writes its samples to files there (prometheus_client's
multiprocess mode) and `exposition` adds up all of them, so a scrape sees
the whole family whichever process answers. A single process (embedded
mode, beat) keeps them in memory.

Metric objects are made on first use (see web.http.metrics, worker.engine.metrics),
after the choice is made, so the import order never matters.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final
from wsgiref.simple_server import make_server

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client import metrics as prometheus_metrics
from prometheus_client import values as prometheus_values
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from shared.addresses import no_delay

log = logging.getLogger(__name__)

MULTIPROC_VARIABLE: Final = "PROMETHEUS_MULTIPROC_DIR"
METRICS_PATH: Final = "/metrics"
# Request latencies from a fast GetTask to a blocking send that waits its limit.
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# Agent calls run from milliseconds to the time limit (300 s by default).
RUN_BUCKETS: Final = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

_directory: Path | None = None
_owned_directory = False


def use_multiprocess_dir(given: str | None = None) -> Path:
    """Make the processes forked from now on count into files in one directory:
    `given` (emptied of old samples) or a new temporary one."""
    global _directory, _owned_directory
    if given:
        directory = Path(given)
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.glob("*.db"):
            old.unlink()
    else:
        directory = Path(tempfile.mkdtemp(prefix="toolnexus-metrics-"))
    os.environ[MULTIPROC_VARIABLE] = str(directory)
    # prometheus_client picks its value class when first imported; choose again
    # now, so metric objects made from here on (in this process and in children
    # forked later) write to the directory.
    prometheus_values.ValueClass = prometheus_values.get_value_class()  # type: ignore[no-untyped-call]
    _directory, _owned_directory = directory, not given
    return directory


def guard_with(lock: Callable[[], Any]) -> None:
    """Make the metric objects made from now on guard their values (and
    their children, by labels) with locks from `lock`.

    For a gevent-patched process (the embedded server): there
    prometheus_client's locks are gevent's, Python code on every count.
    Given the operating system's own lock (`gevent.monkey.get_original`),
    each count costs what it costs unpatched. A greenlet never waits on it:
    what it guards (a sum, a dict of children) holds no I/O, so nothing
    switches greenlets while it is held; OS threads (gevent's resolver, a
    gRPC thread) wait on it as on any lock."""
    prometheus_values.Lock = lock  # type: ignore[assignment,attr-defined]
    prometheus_metrics.Lock = lock  # type: ignore[assignment,attr-defined]


def process_exited(pid: int) -> None:
    """A counting child ended: drop its live gauges (open streams), keep its counts."""
    if _directory is not None:
        mark_process_dead(pid, str(_directory))  # type: ignore[no-untyped-call]


def remove_multiprocess_dir() -> None:
    """At the parent's exit: remove a temporary directory this module made."""
    if _directory is not None and _owned_directory:
        shutil.rmtree(_directory, ignore_errors=True)


def exposition(*read_now: Collector) -> tuple[bytes, str]:
    """The current samples in Prometheus' text format, and its content type;
    `read_now` adds collectors whose figures are read at this scrape."""
    registry: Any = REGISTRY
    if _directory is not None:
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(_directory))  # type: ignore[no-untyped-call]
    body = generate_latest(registry)
    if read_now:
        extra = CollectorRegistry(auto_describe=False)
        for collector in read_now:
            extra.register(collector)
        body += generate_latest(extra)
    return body, CONTENT_TYPE_LATEST


StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def metrics_app() -> Callable[[dict[str, Any], StartResponse], Iterable[bytes]]:
    """A WSGI app serving `GET /metrics` (and nothing else)."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != METRICS_PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found: metrics are at /metrics\n"]
        body, content_type = exposition()
        start_response("200 OK", [("Content-Type", content_type)])
        return [body]

    return app


class _QuietServer(ThreadingWSGIServer):
    daemon_threads = True

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        # The head and the body of a response are separate writes: without
        # TCP_NODELAY the body waits for the scraper's delayed ACK of the head.
        no_delay(connection)
        return connection, address


def serve_metrics(host: str, port: int) -> ThreadingWSGIServer | None:
    """Serve /metrics on host:port from a daemon thread; None (logged) when the
    port cannot be bound: metrics must never stop a worker or beat. No login:
    this is a separate port, meant to stay unpublished (see docs/monitoring.md)."""
    from prometheus_client.exposition import _SilentHandler

    try:
        server = make_server(
            host, port, metrics_app(), server_class=_QuietServer, handler_class=_SilentHandler
        )
    except OSError as error:
        log.warning("metrics: cannot listen on %s:%s (%s); serving no metrics", host, port, error)
        return None
    thread = threading.Thread(target=server.serve_forever, name="toolnexus-metrics", daemon=True)
    thread.start()
    return server
