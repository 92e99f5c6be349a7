"""Work whose queue message was lost is sent again, whatever the broker did.

Every `submitted` task is in the store's waiting index with the time it was
last sent; beat's reaper sends each one waiting longer than the stale
threshold again. The cases that used to lose a task for good:

- a worker that dies between receiving a message and claiming its task
  (the message sits unacknowledged until the visibility timeout);
- a broker that restarts without its data (the queued message is gone).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from celery.contrib.testing.worker import start_worker

from shared.broker.dispatch import CeleryDispatcher
from shared.broker.dispatcher import REAP_TASK
from shared.events import to_state
from shared.settings import Settings
from shared.stores.redis.store import redis_store
from shared.task import CANCELED, COMPLETED, WORKING, iso_at, new_task, state_of, text_message
from shared.transitions import transition
from tests.support.compose import ROOT, LocalStack
from tests.support.polling import wait_for
from tests.support.store_kinds import Stores
from worker.engine.reaper import Resending, resend_waiting, sweep
from worker.runtime.app import create_celery

DYING_CONSUMER = """
import os, signal, sys
from kombu import Connection
with Connection(sys.argv[1]) as connection:
    queue = connection.SimpleQueue(sys.argv[2])
    queue.get(block=True, timeout=10)  # received, never acknowledged
    print("received", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clocked(store_kind: str, stores: Stores) -> tuple[Any, Clock]:
    clock = Clock()
    return stores.open(store_kind, clock=clock), clock


def test_only_tasks_waiting_too_long_are_sent_again(clocked: tuple[Any, Clock]) -> None:
    store, clock = clocked
    old, claimed, done = (store.save(new_task(text_message("user", n)))["id"] for n in "ocd")
    transition(store, claimed, to_state(WORKING))
    transition(store, done, to_state(WORKING))
    transition(store, done, to_state(COMPLETED))
    clock.now += 30
    young = store.save(new_task(text_message("user", "young")))["id"]
    clock.now += 45
    sent: list[str] = []

    assert resend_waiting(store, sent.append, clock.now, older_than=60) == [old]
    assert sent == [old]
    # Sent again now: not again until it has waited another 60 s.
    clock.now += 30
    assert resend_waiting(store, sent.append, clock.now, older_than=60) == [young]
    clock.now += 40
    assert sorted(resend_waiting(store, sent.append, clock.now, older_than=60)) == [old]
    transition(store, old, to_state(WORKING))  # claimed at last: it leaves the index
    clock.now += 1000
    assert resend_waiting(store, sent.append, clock.now, older_than=60) == [young]


def submitted_now(store: Any, clock: Clock) -> str:
    """A task submitted at the test clock's time."""
    task = new_task(text_message("user", "waits"))
    task["status"]["timestamp"] = iso_at(clock.now)
    return str(store.save(task)["id"])


def test_each_resend_of_a_task_waits_twice_as_long_as_the_one_before(
    clocked: tuple[Any, Clock],
) -> None:
    store, clock = clocked
    task_id = submitted_now(store, clock)
    resending = Resending(batch=None, backoff_max=200)
    sends, sent = [], []
    for _ in range(700):  # a reaper run every second
        clock.now += 1
        if resend_waiting(store, sent.append, clock.now, 60, resending):
            sends.append(clock.now - 1000)
    assert set(sent) == {task_id}
    # Due after 60 s, then as long again as it had waited (62, 124 s), then
    # never more than 200 s apart (a message lost meanwhile waits that long).
    assert sends == [61, 123, 247, 448, 649]


def test_a_backlog_is_sent_again_a_batch_a_run_the_longest_waiting_first(
    clocked: tuple[Any, Clock],
) -> None:
    store, clock = clocked
    backlog = []
    for _ in range(5):
        backlog.append(submitted_now(store, clock))
        clock.now += 1
    clock.now += 100
    resending = Resending(batch=2, backoff_max=600)
    runs = [resend_waiting(store, lambda _: None, clock.now, 60, resending) for _ in range(4)]
    assert runs == [backlog[:2], backlog[2:4], backlog[4:], []]


def test_a_broker_that_cannot_take_the_resend_does_not_stop_the_reaper(
    clocked: tuple[Any, Clock],
) -> None:
    store, clock = clocked
    waiting = store.save(new_task(text_message("user", "waiting")))["id"]
    clock.now += 120

    def broker_down(task_id: str) -> None:
        raise ConnectionError("broker unavailable")

    sweep(store, broker_down, clock.now, stale_after=60)
    assert store.last_beat() == clock.now  # the run is recorded: /readyz blames the broker only
    sent: list[str] = []
    sweep(store, sent.append, clock.now + 1, stale_after=60)
    assert sent == [waiting]  # not re-scored by the failed try: the next run sends it


def submit(store_url: str, broker_url: str) -> str:
    settings = Settings(broker_url=broker_url, store=store_url)
    task = redis_store(store_url).save(new_task(text_message("user", "stranded")))
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


FAST = {"TOOLNEXUS_HEARTBEAT": "0.2", "TOOLNEXUS_STALE_AFTER": "1", "TOOLNEXUS_REAP_EVERY": "0.5"}


def test_a_delivery_whose_worker_died_before_claiming_it_is_sent_again(
    redis_url: str, tmp_path: Path
) -> None:
    stack = LocalStack(redis_url.rsplit("/", 1)[0], tmp_path, FAST)
    broker_url = stack.environments["worker"]["TOOLNEXUS_BROKER_URL"]
    task_id = submit(stack.store_url, broker_url)
    died = subprocess.run(
        [sys.executable, "-c", DYING_CONSUMER, broker_url, "toolnexus"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert died.returncode == -9 and "received" in died.stdout, died.stderr
    client = redis.Redis.from_url(broker_url)
    assert client.llen("toolnexus") == 0 and client.hlen("unacked") == 1  # stranded

    beat_log = beat_and_worker_complete(stack, task_id)
    assert f"sent 1 waiting task(s) again: ['{task_id}']" in beat_log


def test_a_task_whose_message_the_broker_lost_is_sent_again(redis_url: str, tmp_path: Path) -> None:
    stack = LocalStack(redis_url.rsplit("/", 1)[0], tmp_path, FAST)
    broker_url = stack.environments["worker"]["TOOLNEXUS_BROKER_URL"]
    task_id = submit(stack.store_url, broker_url)
    redis.Redis.from_url(broker_url).flushdb()  # a broker restarted without its data

    beat_log = beat_and_worker_complete(stack, task_id)
    assert f"sent 1 waiting task(s) again: ['{task_id}']" in beat_log


def test_a_message_never_acknowledged_is_redelivered_after_the_visibility_timeout(
    redis_url: str,
) -> None:
    # No beat and a stale threshold of an hour: only the broker's own
    # redelivery can get this task run. The worker is the project's Celery
    # app with one change, a visibility timeout of 2 s instead of the hard
    # limit + 60 s (390 s), and a look for expired messages on every idle
    # poll, so the test need not wait that long.
    settings = Settings(
        broker_url=redis_url,
        store=redis_url,
        run="tests.support.agents:scripted",
        stale_after=3600,
    )
    store = redis_store(redis_url)
    task_id = submit(redis_url, redis_url)
    died = subprocess.run(
        [sys.executable, "-c", DYING_CONSUMER, redis_url, settings.queue],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert died.returncode == -9 and "received" in died.stdout, died.stderr
    broker = redis.Redis.from_url(redis_url)
    assert broker.llen(settings.queue) == 0 and broker.hlen("unacked") == 1  # stranded

    app = create_celery(settings, store=store)
    app.conf.broker_transport_options = {
        **app.conf.broker_transport_options,
        "visibility_timeout": 2,
        "unacked_restore_throttle": 1,  # look for it on every idle poll
    }
    with start_worker(app, pool="threads", concurrency=1, perform_ping_check=False):
        wait_for(
            lambda: state_of(store.get(task_id)) == COMPLETED,
            timeout=90,
            what="the redelivered message to run the task",
        )
    assert broker.hlen("unacked") == 0
    assert store.waiting(float("inf")) == []  # nothing left for the reaper to send


def ticks_stopped(ticks: Path) -> bool:
    """True once the agent's tick file has not grown for a second."""
    before = ticks.stat().st_size if ticks.exists() else -1
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        time.sleep(0.1)
        if (ticks.stat().st_size if ticks.exists() else -1) != before:
            return False
    return before > 0


@pytest.mark.parametrize("first_sent", [True, False], ids=["with-its-copy", "resent-only"])
@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_cancel_stops_a_call_whose_task_was_sent_again(
    redis_url: str, tmp_path: Path, pool: str, first_sent: bool
) -> None:
    # The task waits in the queue past the resend threshold, so the reaper
    # sends it again. With its first message queued too, one worker takes
    # both: one runs the agent (either may), the other finds the task
    # claimed and does nothing. A cancel after that copy finished must still
    # stop the running call: Celery's worker keeps its messages by Celery id,
    # and a copy under the same id took the running one's entry with it when
    # it finished. With the first message lost, the resend alone runs the
    # call, under an id of its own, and the cancel must find it all the same.
    stack = LocalStack(redis_url.rsplit("/", 1)[0], tmp_path, FAST)
    broker_url = stack.environments["worker"]["TOOLNEXUS_BROKER_URL"]
    settings = Settings(
        broker_url=broker_url,
        store=stack.store_url,
        run="tests.support.agents:ticking",
        heartbeat=0.2,
        stale_after=1,
    )
    store = redis_store(stack.store_url)
    ticks = tmp_path / "ticks"
    task_id = str(store.save(new_task(text_message("user", f"{ticks} 120")))["id"])
    dispatcher = CeleryDispatcher(settings)
    broker = redis.Redis.from_url(broker_url)
    try:
        if first_sent:
            dispatcher.enqueue(task_id)
        wait_for(
            lambda: task_id in store.waiting(time.time() - settings.stale_after),
            what="the task to wait past the resend threshold",
        )
        # What beat runs: the reaper sends the waiting task again.
        create_celery(settings).tasks[REAP_TASK]()
        assert broker.llen(settings.queue) == (2 if first_sent else 1)
        stack.start(
            "worker",
            PYTHONPATH=str(ROOT),
            TOOLNEXUS_RUN=settings.run or "",
            TOOLNEXUS_POOL=pool,
            TOOLNEXUS_CONCURRENCY="2",
        )
        wait_for(lambda: ticks.exists(), timeout=30, what="the agent to run")
        # A copy that found the task claimed is acknowledged; only the
        # running message is left unacknowledged.
        wait_for(
            lambda: broker.llen(settings.queue) == 0 and broker.hlen("unacked") == 1,
            timeout=30,
            what="every message but the running one to be done",
        )
        assert state_of(store.get(task_id)) == WORKING
        assert transition(store, task_id, to_state(CANCELED)).applied  # what CancelTask does
        dispatcher.revoke(task_id)
        wait_for(lambda: ticks_stopped(ticks), timeout=20, what="the canceled call to stop")
        assert state_of(store.get(task_id)) == CANCELED
        assert stack.processes["worker"].alive()
    finally:
        dispatcher.close()
        stack.close()
