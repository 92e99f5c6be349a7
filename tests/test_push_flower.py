"""Push deliveries as Flower shows them (issue 22: "each delivery a Celery
task that Flower shows, a given-up one as failed"): real Flower
(`toolnexus-serve flower`, compose.yaml's command) beside compose's web,
worker and beat on a private Redis, a real webhook receiver in this process.
Flower is read through its own HTTP API, behind its login, as an operator's
script reads it; the tasks page is its datatable over the same records."""

from __future__ import annotations

import ast
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from shared.broker.dispatcher import PUSH_TASK
from shared.stores.redis.store import redis_store
from tests.support.a2a import wait_ready
from tests.support.compose import LocalStack, local_stack
from tests.support.flower import flower_workers_alive
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
            lambda: any(flower_workers_alive(stack, LOGIN).values()),
            timeout=60,
            what="Flower to hear a worker's events",
        )
        yield stack


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    receiver = Receiver().start()
    yield receiver
    receiver.stop()


def a_task_with_a_webhook(stack: LocalStack, url: str, hook_id: str) -> str:
    message = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": [{"text": "hi"}]}
    hook = {
        "id": hook_id,
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


def flower_tasks(stack: LocalStack, **query: str) -> dict[str, dict[str, Any]]:
    """Flower's /api/tasks (uuid -> record), empty while Flower is not up yet."""
    try:
        reply = requests.get(f"{stack.flower_url}/api/tasks", params=query, auth=LOGIN, timeout=10)
    except requests.ConnectionError:
        return {}
    assert reply.status_code == 200, reply.text[:300]
    found: dict[str, dict[str, Any]] = reply.json()
    return found


def arguments(record: dict[str, Any]) -> list[Any]:
    """A record's positional arguments (Flower shows their repr)."""
    shown = record.get("args")
    return list(ast.literal_eval(shown)) if isinstance(shown, str) and shown else []


def records_of(stack: LocalStack, task_id: str) -> list[dict[str, Any]]:
    """Every record Flower holds whose arguments begin with `task_id` (its
    fulfilment and its deliveries), read without any filter of Flower's."""
    return [r for r in flower_tasks(stack).values() if arguments(r)[:1] == [task_id]]


def once_shown(
    stack: LocalStack, task_id: str, shown: Callable[[dict[str, Any]], bool], what: str
) -> list[dict[str, Any]]:
    """The records of `task_id`, once one of them is `shown`: beat's
    task-sent event (which alone carries the routing key) and the worker's
    events come over different connections, so Flower may show a delivery's
    end before it merges in the sending."""

    def seen() -> list[dict[str, Any]] | None:
        records = records_of(stack, task_id)
        return records if any(shown(record) for record in records) else None

    return wait_for(seen, timeout=60, what=f"Flower to show {what} of {task_id}")


def routed(record: dict[str, Any]) -> bool:
    return record.get("routing_key") is not None


def test_a_delivery_is_a_push_queue_task_in_flower_without_its_secrets(
    stack: LocalStack, receiver: Receiver
) -> None:
    task_id = a_task_with_a_webhook(stack, receiver.url("/flower-ok"), "flower-ok-hook")
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
    # Another delivery of the same pair, which found it taken, may reach Flower first.
    records = once_shown(
        stack,
        task_id,
        lambda r: r.get("result") == "'delivered'" and routed(r),
        "a delivery answered 'delivered'",
    )
    delivered = [r for r in records if r.get("result") == "'delivered'" and routed(r)]
    # Sent by beat's sweep to the push queue as a delivery of this task's
    # webhook, run by the worker, answered "delivered".
    for record in delivered:
        assert (record["name"], record["state"]) == (PUSH_TASK, "SUCCESS"), record
        assert record["routing_key"] == "push", record
        assert arguments(record)[:2] == [task_id, "flower-ok-hook"], record
    # Every delivery of the task went to the push queue, and nothing of it failed.
    deliveries = [r for r in records if r.get("name") == PUSH_TASK and routed(r)]
    assert {r["routing_key"] for r in deliveries} == {"push"}, records
    assert [r for r in records if r.get("state") == "FAILURE"] == [], records
    # The token and credentials are not in Flower: the delivery's arguments
    # name the task and the webhook's id only.
    everything = json.dumps(flower_tasks(stack))
    assert task_id in everything
    assert TOKEN not in everything and CREDENTIALS not in everything


def test_a_delivery_that_gives_an_event_up_is_failed_in_flower(
    stack: LocalStack, receiver: Receiver
) -> None:
    receiver.script("/flower-gone", *[(404, {})] * 10)  # 404: given up at once, never retried
    task_id = a_task_with_a_webhook(stack, receiver.url("/flower-gone"), "flower-gone-hook")
    records = once_shown(
        stack,
        task_id,
        lambda r: (r.get("name"), r.get("state")) == (PUSH_TASK, "FAILURE") and routed(r),
        "a failed delivery",
    )
    failed = [r for r in records if r.get("state") == "FAILURE"]
    # What failed is the delivery of this task's webhook, on the push queue,
    # for an event it gave up; nothing else of the task (its fulfilment) did.
    assert {r.get("name") for r in failed} == {PUSH_TASK}, records
    assert {r["routing_key"] for r in failed if routed(r)} == {"push"}, failed
    assert all(arguments(r)[:2] == [task_id, "flower-gone-hook"] for r in failed), failed
    assert any("given up" in str(record.get("exception")) for record in failed), failed
    # Flower's own Failed filter lists it, as the tasks page's filter does, and
    # none of the task's records that succeeded (a record's end state stays).
    listed = set(flower_tasks(stack, state="FAILURE"))
    assert {r["uuid"] for r in failed} <= listed
    assert not {r["uuid"] for r in records if r.get("state") == "SUCCESS"} & listed
