"""Gunicorn settings for the front end.

    gunicorn -c gunicorn.conf.py 'web:create_app()'

gevent workers: a blocking send or an event stream waits on the task's
events, which costs a greenlet, not an OS thread, so one process holds
thousands of them and still answers a fresh GetTask at once. The standard
library is patched here, first of all, so that everything imported after it
(redis-py, kombu, Flask) cooperates; gunicorn patches its workers again.

Where to listen and the log level come from the same TOOLNEXUS_* settings
as everything else; gunicorn's own flags (`-b`, `GUNICORN_CMD_ARGS`) still
win, and `WEB_CONCURRENCY` sets the worker process count as usual.
"""

from gevent import monkey

monkey.patch_all()

import multiprocessing  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from shared.errors import ToolnexusError  # noqa: E402
from shared.settings import Settings  # noqa: E402
from web import create_app  # noqa: E402

try:
    _settings = Settings.from_env()
    # Build the app once here, in the master, and throw it away: a store,
    # skills directory or hook that cannot be loaded then stops start-up with
    # one line, instead of every worker failing to boot with a traceback.
    create_app(_settings)
except (ToolnexusError, ValueError) as error:
    sys.exit(f"toolnexus: {error}")

bind = f"{_settings.host}:{_settings.port}"
# gevent's worker, answering requests it cannot even parse with JSON, not HTML.
worker_class = "web.gunicorn_worker.JsonErrorWorker"
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
accesslog = None
