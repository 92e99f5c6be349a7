"""A real Celery worker (a thread in this process) on a real Redis broker,
fed by the real front end, with every saved transition recorded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
from celery.contrib.testing.worker import start_worker
from celery.worker import state as worker_state
from flask.testing import FlaskClient

from shared.broker.dispatch import CeleryDispatcher
from shared.broker.dispatcher import FULFIL_TASK
from shared.settings import Settings
from shared.stores.redis.store import redis_store
from shared.task import Task, state_of
from tests.support.agents import gate
from tests.support.clock import MovableClock, wait_for_a_beat_now
from tests.support.polling import wait_for
from tests.support.recording_store import RecordingStore
from web import create_app
from worker.engine.reaper import reap_stale
from worker.runtime.app import create_celery

QUEUE = "toolnexus-worker-test"
STALE_AFTER = 1.0
_calls: dict[str, int] = {}
_calls_lock = threading.Lock()


def counted(text: str) -> dict[str, str]:
    """Counts its calls per text, takes a moment, then answers."""
    with _calls_lock:
        _calls[text] = _calls.get(text, 0) + 1
    time.sleep(0.3)
    return {"text": f"counted {text}"}


def calls(text: str) -> int:
    with _calls_lock:
        return _calls.get(text, 0)


class Service:
    def __init__(self, client: FlaskClient, store: RecordingStore, app: Any, url: str) -> None:
        self.client = client
        self.store = store
        self.celery = app
        self.broker = redis.Redis.from_url(url)

    def wait_idle(self) -> None:
        """Until the queue is empty and the worker runs nothing."""
        wait_for(
            lambda: self.broker.llen(QUEUE) == 0 and not worker_state.active_requests,
            what="the worker to go idle",
        )

    def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        reply = self.client.post("/", json=body)
        assert reply.status_code == 200, reply.data
        payload = reply.get_json()
        assert "result" in payload, payload
        return dict(payload["result"])

    def send(self, text: str, **extra: Any) -> Task:
        message = {
            "kind": "message",
            "role": "user",
            "messageId": f"m-{time.monotonic_ns()}",
            "parts": [{"kind": "text", "text": text}],
            **extra,
        }
        return self.rpc("SendMessage", {"message": message})

    def wait_state(self, task_id: str, *states: str, timeout: float = 15) -> Task:
        def probe() -> Task | None:
            task = self.rpc("GetTask", {"id": task_id})
            return task if state_of(task) in states else None

        return wait_for(probe, timeout=timeout, what=f"task {task_id} in {states}")


@pytest.fixture
def service(redis_url: str) -> Iterator[Callable[..., Any]]:
    """`with service(run=...) as svc:` a front end and a Celery worker thread."""

    @contextmanager
    def running(
        run: str, clock: Callable[[], float] = time.time, **overrides: Any
    ) -> Iterator[Service]:
        settings = Settings(
            broker_url=redis_url,
            store=redis_url,
            run=run,
            queue=QUEUE,
            **{"heartbeat": 0.2, "stale_after": STALE_AFTER, "reap_every": 0.3, **overrides},
        )
        store = RecordingStore(redis_store(redis_url, clock=clock))
        app = create_celery(settings, store=store)
        dispatcher = CeleryDispatcher(settings)
        web = create_app(settings, store=store, dispatcher=dispatcher)
        with start_worker(
            app,
            pool="threads",
            concurrency=4,
            perform_ping_check=False,
            loglevel="WARNING",
            shutdown_timeout=20,
        ):
            yield Service(web.test_client(), store, app, redis_url)
        dispatcher.close()

    yield running


def test_full_lifecycle_is_saved_submitted_working_completed(service: Any) -> None:
    with service("examples.agents:echo") as svc:
        sent = svc.send("hello")
        assert state_of(sent) == "submitted"

        task = svc.wait_state(sent["id"], "completed")

        assert svc.store.states(sent["id"]) == ["submitted", "working", "completed"]
        assert task["artifacts"][0]["parts"][0]["text"] == "ran: hello"
        assert task["history"][-1]["role"] == "agent"


def test_an_exception_fails_the_task(service: Any) -> None:
    with service("examples.agents:fail") as svc:
        sent = svc.send("please")

        task = svc.wait_state(sent["id"], "failed")

        assert svc.store.states(sent["id"]) == ["submitted", "working", "failed"]
        reason = task["status"]["message"]["parts"][0]["text"]
        assert reason == "RuntimeError: fail agent refused: please"
        assert not task.get("artifacts")


def test_input_required_then_a_follow_up_completes(service: Any) -> None:
    with service("examples.agents:ask_back") as svc:
        sent = svc.send("hi")
        waiting = svc.wait_state(sent["id"], "input-required")
        assert waiting["status"]["message"]["parts"][0]["text"] == "What is your name?"

        resumed = svc.send("Ada", taskId=sent["id"], contextId=sent["contextId"])
        assert state_of(resumed) == "submitted"
        task = svc.wait_state(sent["id"], "completed")

        assert task["artifacts"][0]["parts"][0]["text"] == "Hello, Ada!"
        assert svc.store.states(sent["id"]) == [
            "submitted",
            "working",
            "input-required",
            "submitted",
            "working",
            "completed",
        ]


def test_cancel_of_a_running_task_is_not_overwritten(service: Any) -> None:
    with service("examples.agents:slow") as svc:
        sent = svc.send("1 sleepy")
        svc.wait_state(sent["id"], "working")
        assert worker_state.active_requests  # so wait_idle below really waits for the run

        canceled = svc.rpc("CancelTask", {"id": sent["id"]})
        assert state_of(canceled) == "canceled"
        # a thread cannot be interrupted: the run goes on, and its result is refused
        svc.wait_idle()

        assert state_of(svc.rpc("GetTask", {"id": sent["id"]})) == "canceled"
        assert svc.store.states(sent["id"]) == ["submitted", "working", "canceled"]


def test_a_duplicate_delivery_does_not_run_twice(service: Any) -> None:
    with service("tests.test_worker_celery:counted") as svc:
        text = f"dup-{time.monotonic_ns()}"
        sent = svc.send(text)
        # the same message again, as a broker redelivery would send it
        svc.celery.send_task(FULFIL_TASK, args=[sent["id"]], task_id=sent["id"], queue=QUEUE)
        svc.wait_state(sent["id"], "completed")
        svc.wait_idle()

        assert calls(text) == 1
        assert svc.store.states(sent["id"]) == ["submitted", "working", "completed"]


def test_heartbeats_keep_a_task_alive_past_the_stale_threshold(service: Any) -> None:
    # The store's clock moves only when the test says; the Celery worker's
    # heartbeat thread beats on real time into it. Each round waits for a
    # beat stamped at the clock's present, then moves the clock most of
    # stale_after on and reaps: four stale_afters pass, and the task lives
    # only if the beats refreshed it.
    clock = MovableClock()
    name = f"celery-beats-{time.monotonic_ns()}"
    entered, opened = gate(name)
    with service("tests.support.agents:gated", clock=clock) as svc:
        try:
            sent = svc.send(f"{name} 1")
            assert entered.wait(30), "the worker never ran the task"
            for _ in range(5):
                wait_for_a_beat_now(svc.store, sent["id"], clock)
                clock.advance(STALE_AFTER * 0.8)
                assert reap_stale(svc.store, clock(), STALE_AFTER) == []
        finally:
            opened.set()
        task = svc.wait_state(sent["id"], "completed", "failed", timeout=60)
        assert state_of(task) == "completed"
