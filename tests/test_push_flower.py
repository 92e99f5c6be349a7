"""Push deliveries as Flower shows them (issue 22: "each delivery a Celery
task that Flower shows, a given-up one as failed"): real Flower
(`toolnexus-serve flower`, compose.yaml's command) beside compose's web,
worker and beat on a private Redis, a real webhook receiver in this process.
Flower is read through its own HTTP API, behind its login, as an operator's
script reads it; the tasks page is its datatable over the same records."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from shared.broker.dispatcher import PUSH_TASK
from shared.stores.redis.store import redis_store
from tests.support.a2a import wait_ready
from tests.support.compose import LocalStack, local_stack
from tests.support.polling import wait_for
from tests.support.webhook_receiver import Receiver

LOGIN = ("admin", "flower-pass")
TOKEN, CREDENTIALS = "tok-never-in-flower", "cred-never-in-flower"
SETTINGS = {
    "FLOWER_BASIC_AUTH": ":".join(LOGIN),
    "TOOLNEXUS_RUN": "examples.agents:ask_back",
    "TOOLNEXUS_CONCURRENCY": "2",
    "TOOLNEXUS_PUSH_ALLOWED_HOSTS": "127.0.0.1",
    "TOOLNEXUS_PUSH_SWEEP": "0.2",
    "TOOLNEXUS_PUSH_LEASE": "1",
    "TOOLNEXUS_PUSH_LINGER": "1",
    "TOOLNEXUS_PUSH_CONNECT_TIMEOUT": "1",
    "TOOLNEXUS_PUSH_READ_TIMEOUT": "1",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    folder: Path = tmp_path_factory.mktemp("push-flower")
    with local_stack(folder, SETTINGS) as (_, stack):
        for name in ("web", "beat", "worker", "flower"):
            stack.start(name, **({"WEB_CONCURRENCY": "1"} if name == "web" else {}))
        wait_ready(stack.web_url)
        wait_for(
            lambda: any(flower_workers_alive(stack).values()),
            timeout=60,
            what="Flower to hear a worker's events",
        )
        yield stack


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    receiver = Receiver().start()
    yield receiver
    receiver.stop()


def a_task_with_a_webhook(stack: LocalStack, url: str) -> str:
    message = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": [{"text": "hi"}]}
    hook = {
        "url": url,
        "token": TOKEN,
        "authentication": {"scheme": "Bearer", "credentials": CREDENTIALS},
    }
    params = {
        "message": message,
        "configuration": {"returnImmediately": True, "taskPushNotificationConfig": hook},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    reply = requests.post(stack.web_url, json=body, headers={"A2A-Version": "1.0"}, timeout=30)
    return str(reply.json()["result"]["task"]["id"])


def flower_workers_alive(stack: LocalStack) -> dict[str, bool]:
    """Flower's event state of the workers (name -> alive), empty while Flower
    is not up or has heard no event yet. Flower binds its event queue before it
    hears anything, so a worker heard means every event sent from now on
    (beat's task-sent included, which alone carries the routing key) reaches
    Flower; one sent before that is gone, which made a delivery sent while
    Flower was starting never show its routing key."""
    try:
        reply = requests.get(
            f"{stack.flower_url}/api/workers", params={"status": "1"}, auth=LOGIN, timeout=10
        )
    except requests.ConnectionError:
        return {}
    assert reply.status_code == 200, reply.text[:300]
    alive: dict[str, bool] = reply.json()
    return alive


def flower_tasks(stack: LocalStack, **query: str) -> dict[str, dict[str, Any]]:
    """Flower's /api/tasks (uuid -> record), empty while Flower is not up yet."""
    try:
        reply = requests.get(f"{stack.flower_url}/api/tasks", params=query, auth=LOGIN, timeout=10)
    except requests.ConnectionError:
        return {}
    assert reply.status_code == 200, reply.text[:300]
    found: dict[str, dict[str, Any]] = reply.json()
    return found


def deliveries_of(
    stack: LocalStack, task_id: str, state: str, result: str | None = None
) -> list[dict[str, Any]]:
    """Flower's push deliveries for `task_id` in `state`, once there is one
    (one answering `result`, when given: another delivery of the same pair,
    which found it taken, may reach Flower first), those Flower shows with
    their routing key: beat's task-sent event (which carries it) and the
    worker's events come over different connections, so Flower may show a
    delivery's end before it merges in the sending."""

    def seen() -> list[dict[str, Any]] | None:
        records = flower_tasks(stack, taskname=PUSH_TASK, state=state).values()
        mine = [
            r for r in records if task_id in str(r.get("args")) and r.get("routing_key") is not None
        ]
        if result is not None and all(r.get("result") != result for r in mine):
            return None
        return mine or None

    return wait_for(seen, timeout=60, what=f"Flower to show a {state} delivery of {task_id}")


def test_a_delivery_is_a_push_queue_task_in_flower_without_its_secrets(
    stack: LocalStack, receiver: Receiver
) -> None:
    task_id = a_task_with_a_webhook(stack, receiver.url("/flower-ok"))
    store = redis_store(stack.store_url)
    wait_for(
        lambda: (
            (r := store.read(task_id)) is not None
            and r.task["status"]["state"] == "input-required"
            and any(hit.event_id == r.seq for hit in receiver.delivered("/flower-ok"))
        ),
        timeout=60,
        what=f"every event of {task_id} delivered",
    )
    delivered = deliveries_of(stack, task_id, "SUCCESS", result="'delivered'")
    assert all(record["name"] == PUSH_TASK for record in delivered)
    # Sent by beat's sweep to the push queue, run by the worker, answered "delivered".
    assert {record["routing_key"] for record in delivered} == {"push"}, delivered
    assert "'delivered'" in {record["result"] for record in delivered}, delivered
    # The token and credentials are not in Flower: the delivery's arguments
    # name the task and the webhook's id only.
    everything = json.dumps(flower_tasks(stack))
    assert task_id in everything
    assert TOKEN not in everything and CREDENTIALS not in everything


def test_a_delivery_that_gives_an_event_up_is_failed_in_flower(
    stack: LocalStack, receiver: Receiver
) -> None:
    receiver.script("/flower-gone", *[(404, {})] * 10)  # 404: given up at once, never retried
    task_id = a_task_with_a_webhook(stack, receiver.url("/flower-gone"))
    failed = deliveries_of(stack, task_id, "FAILURE")
    assert all(record["name"] == PUSH_TASK for record in failed)
    assert any("given up" in str(record.get("exception")) for record in failed), failed
    # Flower's own Failed filter lists it, as the tasks page's filter does.
    assert {r["uuid"] for r in failed} <= set(flower_tasks(stack, state="FAILURE"))
