"""`toolnexus-serve`: the whole service in one process on one port.

The Flask app on gevent's WSGI server (a greenlet per connection, as in a
gunicorn gevent worker), a pool of in-process workers running the same
fulfilment core as the Celery workers, and the reaper, with no Redis and no
broker; with TOOLNEXUS_GRPC_URL set, the gRPC binding too, on
TOOLNEXUS_GRPC_HOST:TOOLNEXUS_GRPC_PORT, over the same methods (grpcio in
its gevent mode: its calls are greenlets as well). This is the one module
that joins web and worker.

Run it through `worker.cli.main` (the `toolnexus-serve` command), which patches
the standard library for gevent before anything else is imported: every
thread here (the workers, the reaper, the heartbeat) is then a greenlet.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import gevent
from gevent import monkey
from gevent.event import Event
from gevent.pywsgi import WSGIServer

from shared.addresses import listening_socket, usable_urls
from shared.errors import ToolnexusError
from shared.ops import tracing
from shared.ops.collector import start_collector
from shared.ops.logs import configure_logging
from shared.ops.metrics import guard_with
from shared.ops.startup import masked, startup_line
from shared.settings import Settings
from shared.store.wiring import open_store
from web import create_app
from web.app import assembly_of
from web.http.disconnects import end_streams
from web.http.gevent_server import gevent_server
from web.http.observe import CountingDispatcher
from worker.command import PROGRAM
from worker.embedded_flags import EMBEDDED_OVERRIDES
from worker.embedded_flags import parse_embedded_args as parse_args
from worker.engine.agent import load_agent
from worker.engine.green_loop import GreenLoop
from worker.engine.inprocess import InProcessDispatcher, default_threads
from worker.engine.reaper import ReaperThread, Resending, resend_waiting, turns_send
from worker.push.delivery import push_thread

if TYPE_CHECKING:
    from web.assembly import Assembly
    from web.grpc.server import GrpcServer

log = logging.getLogger(__name__)

# Where the embedded server's defaults differ from Settings' (a developer's machine).
EMBEDDED_DEFAULTS: Mapping[str, str] = {"TOOLNEXUS_CONSOLE": "true"}
POOL_VARIABLE = "TOOLNEXUS_POOL"


def settings_from(args: argparse.Namespace, env: Mapping[str, str]) -> Settings:
    """The environment with the given options laid over it, validated as one."""
    merged = {**EMBEDDED_DEFAULTS, **env}
    for option, variable in EMBEDDED_OVERRIDES.items():
        value = getattr(args, option)
        if value is not None:
            merged[variable] = value
    return Settings.from_env(merged)


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGINT or SIGTERM; 2 (after one line) for a bad setting."""
    args = parse_args(argv)
    # Every count of every request and task under the OS's lock, not gevent's
    # (before any metric is made: each is made on first use).
    guard_with(monkey.get_original("_thread", "allocate_lock"))
    try:
        settings = settings_from(args, os.environ)
        agent = load_agent(settings)
        store = open_store(settings)
        configure_logging(settings)
    except (ToolnexusError, ValueError) as error:  # a bad setting, a store refusing its folder
        return _refuse(error)

    if note := pool_note(os.environ, default_threads(settings)):
        log.warning(note)
    tracing.enable(PROGRAM)  # when the `otel` extra is installed
    # Its worker threads are greenlets on one OS thread: async agent code runs
    # on one event loop for all of them.
    green_loop = GreenLoop()
    dispatcher = InProcessDispatcher(store, agent, settings, run_async=green_loop.run)
    counting = CountingDispatcher(dispatcher)
    turns = dispatcher.turns
    server: WSGIServer | None = None
    grpc_server: GrpcServer | None = None
    try:
        app = create_app(settings, store=store, dispatcher=counting, strict_hosts=True)
        server = gevent_server(
            listening_socket(settings.host, settings.port), app, idle_timeout=settings.idle_timeout
        )
        if settings.grpc_url is not None:
            grpc_server = serve_grpc(settings, assembly_of(app))
        resend = dispatcher.enqueue if turns is None else turns_send(turns, store)
        # All of them at once, as new: they were left by a run that is gone.
        if resumed := resend_waiting(store, resend, time.time(), 0.0):
            log.info("queued %d task(s) left submitted by a previous run", len(resumed))
    except (ToolnexusError, OSError, RuntimeError) as error:  # bad skills dir, store down,
        # a port taken (grpcio says so with a RuntimeError)
        if server is not None:
            server.close()
        if grpc_server is not None:
            grpc_server.stop(0)
        dispatcher.close(timeout=0)
        return _refuse(error)
    reaper = ReaperThread(
        store,
        dispatcher.enqueue,
        every=settings.reap_every,
        stale_after=settings.stale_after,
        input_timeout=settings.input_timeout,
        on_terminal=agent.on_task,
        clock=time.time,
        turns=turns,
        resending=Resending.of(settings),
        attempts=settings.attempts,
        send_later=dispatcher.enqueue_later,
    ).start()
    pusher = push_thread(store, settings)
    collector = start_collector(settings.gc_freeze_every, settings.gc_thaw_every)
    threads = default_threads(settings)
    reachable = server_urls(settings, server)
    urls = " ".join(reachable)
    # A person starting it locally is led to the console, when it is served.
    console = f", console at {reachable[0]}console/" if settings.console else ""
    grpc_at = ""
    if grpc_server is not None:
        grpc_at = f", gRPC on {settings.grpc_host}:{grpc_server.port}"
    extra = {"url": urls, "workers": threads, "server": "gevent"}
    log.info(startup_line(PROGRAM, settings, extra, omit=EMBEDDED_OMITS))
    _tell(
        settings,
        f"{settings.name} on {urls}"
        f" (store {masked(settings.store)}, run {settings.run or 'none'},"
        f" {threads} in-process workers){grpc_at}{console} - Ctrl-C to stop",
    )
    try:
        _serve_until_signalled(server)
    finally:
        if grpc_server is not None:
            # As the HTTP connections: a second to finish, then open streams end.
            grpc_server.stop(1)
        reaper.stop()
        if pusher is not None:
            pusher.stop()
        if collector is not None:
            collector.stop()
        finished = dispatcher.close(timeout=args.grace)
        green_loop.close()
    if not finished:
        _tell(settings, "stopped with tasks still running; they stay 'working'")
    _tell(settings, "stopped")
    return 0


def pool_note(env: Mapping[str, str], workers: int) -> str | None:
    """Why TOOLNEXUS_POOL, when set, changes nothing here (None when unset).

    Every in-process worker is already a greenlet, so a waiting call costs
    one greenlet whatever the agent; the I/O pools' own time limit and
    instant cancel are built on Celery's consumer, which this server has
    not. Said at start-up so a setting that does nothing is not mistaken
    for one that does."""
    pool = env.get(POOL_VARIABLE)
    if pool is None:
        return None
    return (
        f"{POOL_VARIABLE}={pool} has no effect in the embedded server: each call runs on one"
        f" of its {workers} in-process workers (greenlets; TOOLNEXUS_CONCURRENCY sets how many),"
        " with no time limit, and a cancel refuses a running call's result instead of stopping"
        " it; the I/O pools are for Celery workers (docs/io-workers.md)"
    )


def serve_grpc(settings: Settings, assembly: Assembly) -> GrpcServer:
    """The gRPC binding on the app's own methods, started. grpcio and its
    generated code are imported only here: a server without gRPC does not
    load them, and grpcio's gevent mode must be set before its first object."""
    from grpc.experimental import gevent as grpc_gevent

    grpc_gevent.init_gevent()
    from web.grpc.server import serve
    from web.grpc_process import service_on

    return serve(settings, service_on(assembly))


def server_urls(settings: Settings, server: WSGIServer) -> list[str]:
    """Where a client reaches the server: for 0.0.0.0, this machine's names."""
    return usable_urls(settings.host, server.server_port)


# Start-up line items the embedded server does not use: it has no broker, no
# queue, and no time limits (a greenlet cannot be killed mid-call either).
EMBEDDED_OMITS = ("broker", "queue", "time_limit")


def _serve_until_signalled(server: WSGIServer) -> None:
    """Serve until SIGINT or SIGTERM, then stop taking requests; open event
    streams end at once (a client resumes elsewhere, or after a restart,
    from the last event id it saw), other connections get a second to
    finish, then are closed."""
    stop = Event()
    handlers = [gevent.signal_handler(sig, stop.set) for sig in (signal.SIGINT, signal.SIGTERM)]
    server.start()
    try:
        stop.wait()
    finally:
        for handler in handlers:
            handler.cancel()
        end_streams(server.application)
        server.stop(timeout=1)


def _tell(settings: Settings, text: str) -> None:
    """A line for the person at the terminal; with JSON logs, a record like every other line."""
    if settings.log_format == "json":
        log.info(text)
    else:
        print(f"{PROGRAM}: {text}", file=sys.stderr, flush=True)


def _refuse(error: Exception) -> int:
    print(f"{PROGRAM}: {error}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    # `python -m worker.embedded` has imported all of the above without gevent's
    # patch; the command (the same process, afresh) patches first.
    os.execv(sys.executable, [sys.executable, "-m", "worker.cli.main", *sys.argv[1:]])
