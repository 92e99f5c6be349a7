"""`toolnexus-serve`: the whole service in one process on one port.

The Flask app, a pool of worker threads running the same fulfilment core
as the Celery workers, and the reaper, with no Redis and no broker. This is
the one module that joins web and worker.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from types import FrameType
from typing import Any

from werkzeug.serving import BaseWSGIServer, make_server

from shared import tracing
from shared.errors import ConfigError, ToolnexusError
from shared.logs import configure_logging
from shared.settings import Settings
from shared.startup import masked, startup_line
from shared.wiring import open_store
from web import create_app
from web.http_errors import JsonErrorRequestHandler
from web.observe import CountingDispatcher
from worker.agent import load_agent
from worker.inprocess import InProcessDispatcher, default_threads
from worker.push import push_thread
from worker.reaper import ReaperThread, resend_waiting

log = logging.getLogger(__name__)

PROGRAM = "toolnexus-serve"
# Option -> the variable it overrides; Settings.from_env validates both the same way.
OVERRIDES: Mapping[str, str] = {
    "host": "TOOLNEXUS_HOST",
    "port": "TOOLNEXUS_PORT",
    "store": "TOOLNEXUS_STORE",
    "run": "TOOLNEXUS_RUN",
    "skills": "TOOLNEXUS_SKILLS",
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description="Serve an A2A agent in one process: front end, in-process worker, reaper.",
        epilog="Every other setting comes from its TOOLNEXUS_* environment variable.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    parser.add_argument("--host", help="interface to bind (TOOLNEXUS_HOST, default 127.0.0.1)")
    parser.add_argument("--port", help="port to listen on (TOOLNEXUS_PORT, default 8080)")
    parser.add_argument(
        "--store", help="task store: memory, file:<dir>, ... (TOOLNEXUS_STORE, default memory)"
    )
    parser.add_argument("--run", help="fulfilment function package.module:function (TOOLNEXUS_RUN)")
    parser.add_argument("--skills", help="directory searched for **/SKILL.md (TOOLNEXUS_SKILLS)")
    parser.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="seconds running tasks get to finish on shutdown (default 10)",
    )
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace, env: Mapping[str, str]) -> Settings:
    """The environment with the given options laid over it, validated as one."""
    merged = dict(env)
    for option, variable in OVERRIDES.items():
        value = getattr(args, option)
        if value is not None:
            merged[variable] = value
    return Settings.from_env(merged)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # `--run mymodule:fn` finds ./mymodule.py, as gunicorn and celery do.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        settings = settings_from(args, os.environ)
        agent = load_agent(settings)
        store = open_store(settings)
        configure_logging(settings)
        # Each request is logged once by web.observe; werkzeug's own access
        # lines would only repeat it.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    except (ConfigError, ValueError) as error:
        return _refuse(error)

    tracing.enable(PROGRAM)  # when the `otel` extra is installed
    dispatcher = InProcessDispatcher(store, agent, settings)
    server: BaseWSGIServer | None = None
    try:
        app = create_app(
            settings, store=store, dispatcher=CountingDispatcher(dispatcher), strict_hosts=True
        )
        server = _bind(settings.host, settings.port, app, settings.idle_timeout)
        if resumed := resend_waiting(store, dispatcher.enqueue, time.time(), 0.0):
            log.info("queued %d task(s) left submitted by a previous run", len(resumed))
    except (ToolnexusError, OSError) as error:  # bad skills dir, store down, port taken
        if server is not None:
            server.server_close()
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
    ).start()
    pusher = push_thread(store, settings)
    threads = default_threads(settings)
    log.info(
        startup_line(PROGRAM, settings, {"url": server_url(settings, server), "threads": threads})
    )
    _tell(
        settings,
        f"{settings.name} on {server_url(settings, server)}"
        f" (store {masked(settings.store)}, run {settings.run or 'none'},"
        f" {threads} worker threads) - Ctrl-C to stop",
    )
    try:
        _serve_until_signalled(server)
    finally:
        reaper.stop()
        if pusher is not None:
            pusher.stop()
        finished = dispatcher.close(timeout=args.grace)
    if not finished:
        _tell(settings, "stopped with tasks still running; they stay 'working'")
    _tell(settings, "stopped")
    return 0


def package_version() -> str:
    try:
        return metadata.version("toolnexus-serve")
    except metadata.PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown"


def server_url(settings: Settings, server: BaseWSGIServer) -> str:
    return f"http://{settings.host}:{server.port}/"


def _serve_until_signalled(server: BaseWSGIServer) -> None:
    """Serve on a thread until SIGINT or SIGTERM, then stop taking requests."""
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    serving = threading.Thread(target=server.serve_forever, name="toolnexus-http", daemon=True)
    serving.start()
    try:
        while serving.is_alive() and not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _bind(host: str, port: int, app: Any, idle_timeout: float) -> BaseWSGIServer:
    """Bind first, so a taken port is one OSError here rather than werkzeug's
    own message and exit. Each connection costs a thread here, so one that
    sends nothing for `idle_timeout` seconds is closed."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    handler = type("Handler", (JsonErrorRequestHandler,), {"timeout": idle_timeout})
    with socket.create_server((host, port), family=family) as listening:
        return make_server(
            host, port, app, threaded=True, fd=listening.fileno(), request_handler=handler
        )


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
    sys.exit(main())
