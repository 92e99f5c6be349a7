"""The front end's real Celery dispatcher and Redis store against private Redis servers."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from greenlet import GreenletExit

from shared import Settings, memory_store
from shared.broker.dispatch import CeleryDispatcher
from shared.broker.dispatcher import FULFIL_TASK
from tests.support.redis_server import RedisServer, free_port
from tests.test_web_support import PlayingDispatcher, rpc, user_message
from web import create_app

QUEUE = "toolnexus-web-test"


@pytest.fixture
def celery_app_client(redis_url: str) -> Iterator[tuple[FlaskClient, Any]]:
    store = memory_store()
    app = create_app(Settings(broker_url=redis_url, queue=QUEUE), store=store)
    dispatcher = app.extensions["toolnexus"].dispatcher
    assert isinstance(dispatcher, CeleryDispatcher)
    yield app.test_client(), store
    dispatcher.close()


def test_send_puts_one_fulfil_message_on_the_queue(
    celery_app_client: tuple[FlaskClient, Any], redis_url: str
) -> None:
    client, store = celery_app_client
    task = rpc(client, "SendMessage", {"message": user_message()})["result"]
    assert task["status"]["state"] == "submitted"
    broker = redis.Redis.from_url(redis_url)
    assert broker.llen(QUEUE) == 1
    message = json.loads(broker.lindex(QUEUE, 0) or b"{}")
    assert message["headers"]["task"] == FULFIL_TASK
    assert message["headers"]["id"] == task["id"]  # Celery task id == A2A task id
    args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
    assert (args, kwargs) == ([task["id"]], {})
    assert store.get(task["id"])["status"]["state"] == "submitted"
    canceled = rpc(client, "CancelTask", {"id": task["id"]})["result"]  # revoke goes out too
    assert canceled["status"]["state"] == "canceled"
    store.record_beat()  # as beat's reaper does
    ready = client.get("/readyz")
    assert (ready.status_code, ready.get_json()["broker"]) == (200, "ok")


def test_broker_down_leaves_the_task_submitted_for_the_resend_and_says_broker_unavailable() -> None:
    store = memory_store()
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    app = create_app(Settings(broker_url=nowhere, queue=QUEUE), store=store)
    client = app.test_client()
    for method, version in (("SendMessage", None), ("message/send", None), ("SendMessage", "1.0")):
        error = rpc(client, method, {"message": user_message()}, version=version)["error"]
        assert error["code"] == -32603
        assert error["message"] == "broker unavailable"
    tasks = list(store.all().values())
    assert len(tasks) == 3
    assert {task["status"]["state"] for task in tasks} == {"submitted"}
    # Each in the waiting index, where beat's resend finds it once the broker is back.
    assert sorted(store.waiting(time.time() + 1)) == sorted(task["id"] for task in tasks)
    store.record_beat()
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.get_json() == {"status": "unavailable", "broker": "broker unavailable"}
    app.extensions["toolnexus"].dispatcher.close()


def test_redis_store_outage_is_reported_and_recovered_from() -> None:
    server = RedisServer(appendonly=True).start()  # the task must survive the restart
    try:
        store_url = f"{server.url}/1"
        app = create_app(Settings(store=store_url), dispatcher=PlayingDispatcher(memory_store()))
        client = app.test_client()
        task = rpc(client, "SendMessage", {"message": user_message()})["result"]
        server.stop()
        for method in ("GetTask", "SendMessage", "CancelTask"):
            error = rpc(client, method, {"id": task["id"], "message": user_message()})["error"]
            assert (error["code"], error["message"]) == (-32603, "task store unavailable")
        assert client.get("/readyz").get_json()["store"] == (
            "task store unavailable: cannot connect to Redis"
        )
        server.start()
        assert rpc(client, "GetTask", {"id": task["id"]})["result"]["id"] == task["id"]
        app.extensions["toolnexus"].store.record_beat()
        assert client.get("/readyz").status_code == 200
    finally:
        server.close()


class InterruptedDispatcher(PlayingDispatcher):
    """A publish cut short by the request's end: gevent kills a request's
    greenlet with GreenletExit (a BaseException) at a server's shutdown."""

    def enqueue(self, task_id: str) -> None:
        raise GreenletExit


@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
def test_a_publish_cut_short_leaves_the_task_it_saved_for_the_resend(method: str) -> None:
    store = memory_store()
    app = create_app(Settings(), store=store, dispatcher=InterruptedDispatcher(memory_store()))
    with pytest.raises(GreenletExit):
        rpc(app.test_client(), method, {"message": user_message()}, version="1.0")
    (task,) = store.all().values()
    assert task["status"]["state"] == "submitted"  # the message may or may not be out
    assert store.waiting(time.time() + 1) == [task["id"]]  # beat's resend finds it
