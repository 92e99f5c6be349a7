"""Scenario: the Redis broker is SIGKILLed under a real Celery worker, again
and again, at different moments: while tasks run and the worker publishes
their events, and while it idles in BRPOP. Redis comes back on the same
port each time, and the worker must still be alive and run new tasks.

Before the fix in shared.broker.redis (and with kombu's own transport) the
worker could exit with "Unrecoverable error: AttributeError 'NoneType' object
has no attribute 'hostname'": Celery's consumer collects the lost connection
(which detaches kombu's transport from it) and then closes it again; that
close of a channel the collect left open drops the channel's pool and
restores its unacknowledged messages, and making the new pool read the
detached connection. It is a race (an unacknowledged message and a channel
left open are needed), so each run kills Redis at several moments; before
the fix about one run in four or six failed here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support.crash_worker import DONE, make_app
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.timeout(300)

# Seconds after the load starts that Redis is killed: mid-publish under
# load, and after the load has drained (the consumer idle in BRPOP).
KILL_MOMENTS = (0.05, 0.3, 0.8, 2.5, 0.0, 1.5)
TASK_SECONDS = 0.05
WORKER_DEADLINE = 90.0  # generous: a loaded machine is slow, not wrong


@pytest.fixture
def server() -> Iterator[RedisServer]:
    try:
        started = RedisServer().start()
    except (FileNotFoundError, RuntimeError, TimeoutError) as error:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"NO REDIS: {error}")
        pytest.skip(f"NO REDIS: {error}")
    yield started
    started.close()


def start_worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "TOOLNEXUS_BROKER_URL": url}
    command = [sys.executable, "-m", "celery", "-A", "tests.support.crash_worker", "worker"]
    command += ["-c", "2", "-P", "prefork", "--loglevel", "INFO", "--logfile", str(log)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def send_until(url: str, stop: threading.Event) -> None:
    """Keep tasks flowing (and their events) until told to stop; sends fail while Redis is down."""
    app = make_app(url)
    app.conf.broker_connection_retry = False
    while not stop.is_set():
        try:
            app.send_task("crash-worker.mark", args=["load", TASK_SECONDS], retry=False)
        except Exception:  # Redis is down: try again
            time.sleep(0.02)
    app.close()


def runs_a_new_task(url: str, worker: subprocess.Popen[bytes], log: Path) -> None:
    marker = uuid.uuid4().hex
    app = make_app(url)
    wait_for(lambda: _sent(app, marker), timeout=WORKER_DEADLINE, what="a send to succeed")
    done = redis.Redis.from_url(url)

    def ran() -> bool:
        assert worker.poll() is None, f"the worker died: {_fatal(log)}"
        return marker.encode() in done.lrange(DONE, 0, -1)

    wait_for(ran, timeout=WORKER_DEADLINE, interval=0.1, what="the worker to run a new task")
    app.close()


def _sent(app: object, marker: str) -> bool:
    try:
        app.send_task("crash-worker.mark", args=[marker, 0.0], retry=False)  # type: ignore[attr-defined]
    except Exception:  # not back yet
        return False
    return True


def _fatal(log: Path) -> str:
    """The worker's last words: its unrecoverable error line, else its log's end."""
    lines = log.read_text().splitlines()
    fatal = [line for line in lines if "Unrecoverable error" in line]
    return "\n".join(fatal or lines[-30:])


def _losses(log: Path) -> int:
    """How many times the worker has logged a lost broker connection."""
    return log.read_text().count("Connection to broker lost") if log.exists() else 0


def test_the_worker_outlives_broker_crashes(server: RedisServer, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    url = f"{server.url}/0"
    worker = start_worker(url, log)
    try:
        runs_a_new_task(url, worker, log)
        for moment in KILL_MOMENTS:
            noticed = _losses(log)
            stop = threading.Event()
            sender = threading.Thread(target=send_until, args=(url, stop), daemon=True)
            sender.start()
            time.sleep(moment)  # the moment varies on purpose: it is a race
            server.kill()
            stop.set()
            sender.join(30)
            # Let the worker see the loss (or not, at 0 s) before Redis returns.
            wait_for(
                lambda seen=noticed: worker.poll() is not None or _losses(log) > seen,  # type: ignore[misc]
                timeout=WORKER_DEADLINE,
                what="the worker to notice the broker is gone",
            )
            server.start()
            runs_a_new_task(url, worker, log)
        assert "Unrecoverable error" not in log.read_text()
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)
