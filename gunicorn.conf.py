"""Gunicorn settings for the front end.

    gunicorn -c gunicorn.conf.py 'web:create_app()'

Threaded workers, because a blocking SendMessage holds its thread while it
waits for the task (up to TOOLNEXUS_BLOCKING_TIMEOUT). Where to listen and
the log level come from the same TOOLNEXUS_* settings as everything else;
gunicorn's own flags (`-b`, `--threads`, `GUNICORN_CMD_ARGS`) still win, and
`WEB_CONCURRENCY` sets the worker process count as usual.
"""

import multiprocessing
import os
import sys

from shared.errors import ToolnexusError
from shared.settings import Settings
from web import create_app

try:
    _settings = Settings.from_env()
    # Build the app once here, in the master, and throw it away: a store,
    # skills directory or hook that cannot be loaded then stops start-up with
    # one line, instead of every worker failing to boot with a traceback.
    create_app(_settings)
except (ToolnexusError, ValueError) as error:
    sys.exit(f"toolnexus: {error}")

bind = f"{_settings.host}:{_settings.port}"
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", min(2 * multiprocessing.cpu_count(), 8)))
threads = 16
# A worker busy in a blocking send is not hung: allow for the longest wait.
timeout = int(_settings.blocking_timeout) + 30
graceful_timeout = int(_settings.blocking_timeout) + 5
keepalive = 5
loglevel = _settings.log_level.lower()
errorlog = "-"
accesslog = None
