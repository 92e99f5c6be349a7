"""A worker that dies between receiving a message and claiming its task.

A stand-in consumer receives the fulfil message the way a Celery worker
does (unacknowledged, so the Redis transport keeps it aside) and is then
SIGKILLed. Without rescue the task would sit `submitted` for the whole
visibility timeout; beat gives the message back after the stale threshold
and a live worker completes the task.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import redis

from shared.redis_store import redis_store
from shared.settings import Settings
from shared.task import COMPLETED, WORKING, new_task, state_of, text_message, with_status
from tests.support.compose import ROOT, LocalStack
from tests.support.polling import wait_for
from web.dispatch import CeleryDispatcher
from worker.celery_app import create_celery
from worker.rescue import BROKER_MARKER, requeue_after_broker_loss, rescue_stuck_deliveries

DYING_CONSUMER = """
import os, signal, sys
from kombu import Connection
with Connection(sys.argv[1]) as connection:
    queue = connection.SimpleQueue(sys.argv[2])
    queue.get(block=True, timeout=10)  # received, never acknowledged
    print("received", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def strand_a_delivery(broker_url: str, queue: str) -> None:
    """Leave one message received-but-unacknowledged by a consumer that died."""
    died = subprocess.run(
        [sys.executable, "-c", DYING_CONSUMER, broker_url, queue],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert died.returncode == -9 and "received" in died.stdout, died.stderr
    client = redis.Redis.from_url(broker_url)
    assert client.llen(queue) == 0
    assert client.hlen("unacked") == 1


def submit(store_url: str, broker_url: str, *, state: str | None = None) -> str:
    settings = Settings(broker_url=broker_url, store=store_url)
    store = redis_store(store_url)
    task = new_task(text_message("user", "stranded"))
    store.save(with_status(task, state) if state else task)
    CeleryDispatcher(settings).enqueue(task["id"])
    return str(task["id"])


def beat_and_worker_complete(stack: LocalStack, task_id: str) -> str:
    """Start beat and a worker, wait for the task to complete; beat's log."""
    store = redis_store(stack.store_url)
    try:
        stack.start("beat")
        stack.start("worker")

        def completed() -> bool:
            task = store.get(task_id)
            return task is not None and state_of(task) == COMPLETED

        wait_for(completed, timeout=30, what=f"task {task_id} to be completed")
        return stack.processes["beat"].output()
    finally:
        stack.close()


def test_rescue_requeues_only_unclaimed_stale_deliveries(redis_url: str) -> None:
    base = redis_url.rsplit("/", 1)[0]
    broker_url, store_url = f"{base}/0", f"{base}/1"
    settings = Settings(broker_url=broker_url, store=store_url, stale_after=30)
    app, store = create_celery(settings), redis_store(store_url)

    task_id = submit(store_url, broker_url)
    strand_a_delivery(broker_url, settings.queue)
    now = time.time()
    assert rescue_stuck_deliveries(app, store, now, settings.stale_after) == []  # not stale yet
    assert rescue_stuck_deliveries(app, store, now + 31, settings.stale_after) == [task_id]
    client = redis.Redis.from_url(broker_url)
    assert client.llen(settings.queue) == 1 and client.hlen("unacked") == 0
    assert rescue_stuck_deliveries(app, store, now + 62, settings.stale_after) == []

    # A delivery whose task was claimed is the reaper's business, not rescue's.
    client.delete(settings.queue)
    submit(store_url, broker_url, state=WORKING)
    strand_a_delivery(broker_url, settings.queue)
    assert rescue_stuck_deliveries(app, store, now + 31, settings.stale_after) == []
    assert client.hlen("unacked") == 1


def test_beat_rescues_the_task_and_a_live_worker_completes_it(
    redis_url: str, tmp_path: Path
) -> None:
    base = redis_url.rsplit("/", 1)[0]
    stack = LocalStack(
        base,
        tmp_path,
        {"TOOLNEXUS_HEARTBEAT": "0.2", "TOOLNEXUS_STALE_AFTER": "1", "TOOLNEXUS_REAP_EVERY": "0.5"},
    )
    broker_url = stack.environments["worker"]["TOOLNEXUS_BROKER_URL"]
    redis.Redis.from_url(broker_url).set(BROKER_MARKER, "1")  # the broker lost nothing
    task_id = submit(stack.store_url, broker_url)
    strand_a_delivery(broker_url, "toolnexus")
    beat_log = beat_and_worker_complete(stack, task_id)
    assert f"requeued 1 never-started task(s): ['{task_id}']" in beat_log


def test_submitted_tasks_are_resent_when_the_broker_lost_its_data(redis_url: str) -> None:
    base = redis_url.rsplit("/", 1)[0]
    broker_url, store_url = f"{base}/0", f"{base}/1"
    settings = Settings(broker_url=broker_url, store=store_url)
    app, store = create_celery(settings), redis_store(store_url)
    waiting = {store.save(new_task(text_message("user", f"w{n}")))["id"] for n in range(3)}
    store.save(with_status(new_task(text_message("user", "done")), COMPLETED))
    store.save(with_status(new_task(text_message("user", "busy")), WORKING))
    broker = redis.Redis.from_url(broker_url)

    assert set(requeue_after_broker_loss(app, store, settings.queue)) == waiting
    assert broker.llen(settings.queue) == 3
    assert requeue_after_broker_loss(app, store, settings.queue) == []  # marker set: no loss
    assert broker.llen(settings.queue) == 3

    broker.flushdb()  # Redis restarted without persistence: queue and marker gone
    assert set(requeue_after_broker_loss(app, store, settings.queue)) == waiting
    assert broker.llen(settings.queue) == 3


def test_beat_and_a_worker_finish_tasks_whose_messages_the_broker_lost(
    redis_url: str, tmp_path: Path
) -> None:
    base = redis_url.rsplit("/", 1)[0]
    stack = LocalStack(base, tmp_path, {"TOOLNEXUS_REAP_EVERY": "0.5"})
    broker_url = stack.environments["worker"]["TOOLNEXUS_BROKER_URL"]
    task_id = submit(stack.store_url, broker_url)
    redis.Redis.from_url(broker_url).flushdb()  # the queued message is gone
    beat_log = beat_and_worker_complete(stack, task_id)
    assert "resent 1 submitted task(s)" in beat_log
