"""Gunicorn settings for the front end, packaged: no file needed in the cwd.

    toolnexus-serve web [--host H] [--port P]          # runs gunicorn with these
    gunicorn -c python:web.http.gunicorn_conf 'web:create_app()'

gevent workers: a blocking send or an event stream waits on the task's
events, which costs a greenlet, not an OS thread, so one process holds
thousands of them and still answers a fresh GetTask at once. The standard
library is patched here, first of all, so that everything imported after it
(redis-py, kombu, Flask) cooperates; gunicorn patches its workers again.

Where to listen and the log level come from the same TOOLNEXUS_* settings
as everything else; gunicorn's own flags (`-b`, `GUNICORN_CMD_ARGS`) still
win, and `WEB_CONCURRENCY` sets the worker process count as usual.

Every worker process counts into one metrics directory (prometheus_client's
multiprocess mode: `PROMETHEUS_MULTIPROC_DIR` when set, else a temporary
one), so `/metrics` adds up all of them whichever worker answers.
"""

from gevent import monkey

monkey.patch_all()

import logging  # noqa: E402
import multiprocessing  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from typing import Any  # noqa: E402

from shared.addresses import is_wildcard, usable_urls  # noqa: E402
from shared.errors import ToolnexusError  # noqa: E402
from shared.ops import metrics  # noqa: E402
from shared.ops.collector import start_collector  # noqa: E402
from shared.ops.logs import logging_config  # noqa: E402
from shared.ops.startup import refuse_private_store, startup_line  # noqa: E402
from shared.settings import Settings  # noqa: E402
from web import create_app  # noqa: E402

try:
    _settings = Settings.from_env()
    # Build the app once here, in the master, and throw it away: a store,
    # skills directory or hook that cannot be loaded then stops start-up with
    # one line, instead of every worker failing to boot with a traceback.
    create_app(_settings)
    refuse_private_store(_settings, "gunicorn")
except (ToolnexusError, ValueError) as error:
    print(f"toolnexus: {error}", file=sys.stderr)
    sys.exit(2)

# Before any worker is forked, so every one of them counts into the directory.
metrics.use_multiprocess_dir(os.environ.get(metrics.MULTIPROC_VARIABLE))

bind = f"{_settings.host}:{_settings.port}"
# gunicorn sets TCP_NODELAY on its TCP listeners itself (gunicorn/sock.py) and
# every connection they accept inherits it: no write of a response waits for
# a client's delayed ACK (the embedded server sets it in shared.addresses).
# gevent's worker, answering requests it cannot even parse with JSON, not HTML.
worker_class = "web.http.gunicorn_worker.JsonErrorWorker"
# Per process: open streams, waiting blocking sends and idle keep-alive
# connections all count against this.
worker_connections = 4096
workers = int(os.environ.get("WEB_CONCURRENCY", multiprocessing.cpu_count()))
# A worker is "hung" only if its event loop is blocked this long; waiting
# requests never block it.
timeout = 30
graceful_timeout = int(_settings.blocking_timeout) + 5
# A connection must send its (next) request whole within this many seconds,
# or it is closed: idle keep-alive connections and slow-header clients alike.
keepalive = max(1, round(_settings.idle_timeout))
loglevel = _settings.log_level.lower()
errorlog = "-"
# The app logs one line per request itself (web.http.observe), with its request
# id; gunicorn's own access lines only with --access-logfile.
accesslog = None
logger_class = "web.http.gunicorn_worker.AccessOnRequestLogger"
# gunicorn's own lines in the service's format (TOOLNEXUS_LOG_FORMAT) too.
logconfig_dict = logging_config(_settings)
logconfig_dict["loggers"]["gunicorn.error"] = {
    "level": _settings.log_level,
    "handlers": ["stderr"],
    "propagate": False,
}


def post_worker_init(worker: Any) -> None:
    # In each worker, once its app is loaded: its streams' objects kept out
    # of the full collections that would stop them all (shared.ops.collector).
    start_collector(_settings.gc_freeze_every, _settings.gc_thaw_every)


def when_ready(server: Any) -> None:
    extra = {"bind": ",".join(server.cfg.bind), "workers": server.cfg.workers}
    if _settings.host == _bound_host(server.cfg.bind) and is_wildcard(_settings.host):
        extra["urls"] = " ".join(usable_urls(_settings.host, _settings.port))
    # A front end never runs the agent (it names the one the fleet runs): no
    # heartbeat or time limit of its own.
    line = startup_line("web", _settings, extra, omit=("heartbeat", "time_limit"))
    logging.getLogger("web.startup").info(line)


def _bound_host(binds: list[str]) -> str:
    host, _, _ = binds[0].rpartition(":") if binds else ("", "", "")
    return host.strip("[]")


def child_exit(server: Any, worker: Any) -> None:
    metrics.process_exited(worker.pid)


def on_exit(server: Any) -> None:
    metrics.remove_multiprocess_dir()
