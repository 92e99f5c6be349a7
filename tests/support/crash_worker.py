"""A Celery app with the worker's broker settings and one task, for tests
that crash the broker under a real worker (tests/test_broker_crash.py).

The broker URL comes from TOOLNEXUS_BROKER_URL in the worker's environment:
the test starts `celery -A tests.support.crash_worker worker` itself.
"""

from __future__ import annotations

import os
import time

import redis
from celery import Celery

from shared.settings import Settings
from worker.runtime.app import celery_config

DONE = "crash-worker:done"  # the task pushes its marker here once it ran


def make_app(broker_url: str) -> Celery:
    config = celery_config(Settings(broker_url=broker_url))
    config.pop("beat_schedule")  # no beat here, and no project tasks to schedule
    app = Celery("crash-worker")
    app.conf.update(config)

    @app.task(name="crash-worker.mark")  # type: ignore[untyped-decorator]
    def mark(marker: str, seconds: float) -> None:
        time.sleep(seconds)  # busy: the worker publishes its events meanwhile
        redis.Redis.from_url(broker_url).rpush(DONE, marker)

    return app


app = make_app(os.environ.get("TOOLNEXUS_BROKER_URL", "redis://127.0.0.1:6379/0"))
