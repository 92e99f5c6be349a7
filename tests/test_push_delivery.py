"""Push delivery end to end: compose.yaml's web, beat and worker commands
on a private Redis, a real HTTP receiver in this process, real Celery
workers delivering from the event log. Short retry settings keep it quick;
nothing here asserts how fast anything is (one lower bound: a Retry-After
is waited out)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from shared.dialects import stream_response
from shared.push.contract import Cursor, PushStore
from shared.store.contract import Store
from tests.support.a2a import wait_ready
from tests.support.compose import Backends, LocalStack, local_stack
from tests.support.polling import wait_for
from tests.support.redis_server import free_port
from tests.support.shortcuts import push_store
from tests.support.webhook_receiver import Hit, Receiver

SECRET = "s3cret-credentials"
SETTINGS = {
    "TOOLNEXUS_RUN": "examples.agents:ask_back",
    "TOOLNEXUS_CONCURRENCY": "2",
    "TOOLNEXUS_PUSH_ALLOWED_HOSTS": "127.0.0.1",
    "TOOLNEXUS_PUSH_SWEEP": "0.2",
    "TOOLNEXUS_PUSH_BACKOFF": "0.05",
    "TOOLNEXUS_PUSH_BACKOFF_MAX": "0.3",
    "TOOLNEXUS_PUSH_RETRY_FOR": "120",
    "TOOLNEXUS_PUSH_CONNECT_TIMEOUT": "1",
    "TOOLNEXUS_PUSH_READ_TIMEOUT": "1",
    "TOOLNEXUS_PUSH_LEASE": "1",
    "TOOLNEXUS_PUSH_LINGER": "1",
}


# On the deployment matrix (tests/support/matrix.py); in CI the two marked
# matrix(ci=True) run on RabbitMQ too: deliveries, their retries and a
# killed delivery worker's hand-over on the push queue there.
pytestmark = pytest.mark.matrix


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, backends: Backends) -> Iterator[LocalStack]:
    folder: Path = tmp_path_factory.mktemp("push")
    with local_stack(folder, SETTINGS, backends=backends) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("beat")
        stack.start("worker")
        wait_ready(stack.web_url)
        yield stack


@pytest.fixture(scope="module")
def receiver(stack: LocalStack) -> Iterator[Receiver]:
    # One per stack: the matrix runs this module once per combination, and a
    # receiver shared between them holds the earlier stack's deliveries too.
    receiver = Receiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def store(stack: LocalStack) -> Store:
    return stack.open_store()


def rpc(stack: LocalStack, method: str, params: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    reply = requests.post(stack.web_url, json=body, headers={"A2A-Version": "1.0"}, timeout=30)
    answer = reply.json()
    assert "result" in answer, answer
    return answer["result"]


def send(stack: LocalStack, text: str, task_id: str | None = None, **hook: Any) -> str:
    message: dict[str, Any] = {
        "role": "ROLE_USER",
        "messageId": uuid.uuid4().hex,
        "parts": [{"text": text}],
    }
    if task_id:
        message["taskId"] = task_id
    configuration: dict[str, Any] = {"returnImmediately": True}
    if hook:
        configuration["taskPushNotificationConfig"] = hook
    task = rpc(stack, "SendMessage", {"message": message, "configuration": configuration})["task"]
    return str(task["id"])


def settled(store: Store, task_id: str, state: str) -> int:
    """Waits for the task to reach `state`; its last event's number."""

    def reached() -> int | None:
        record = store.read(task_id)
        return record.seq if record and record.task["status"]["state"] == state else None

    return wait_for(reached, timeout=30, what=f"task {task_id} {state}")


def expected(store: Store, task_id: str) -> list[tuple[int, Any]]:
    return [(seq, stream_response("1.0", event)) for seq, event in store.events(task_id, 0)]


def in_order(hits: list[Hit]) -> list[tuple[int, Any]]:
    """What the receiver accepted, duplicates (at least once) dropped by id."""
    seen: dict[int, Any] = {}
    for hit in hits:
        seen.setdefault(hit.event_id, hit.body)
    ids = [hit.event_id for hit in hits]
    assert ids == sorted(ids), f"out of order: {ids}"
    return list(seen.items())


def all_delivered(receiver: Receiver, path: str, store: Store, task_id: str, last: int) -> None:
    wait_for(
        lambda: any(hit.event_id == last for hit in receiver.delivered(path)),
        # Generous: once (RabbitMQ, four stacks at once, load ~22) the first
        # deliveries after start-up took over 30 s.
        timeout=90,
        what=f"event {last} of {task_id} at {path}",
    )
    assert in_order(receiver.delivered(path)) == expected(store, task_id)


def cursor_at(push: PushStore, task_id: str, config_id: str, last: int) -> Cursor:
    return wait_for(
        lambda: (c := push.cursor(task_id, config_id)).delivered >= last and c,
        timeout=30,
        what=f"{task_id}'s cursor at {last}",
    )


def worker_logs(stack: LocalStack) -> str:
    return "".join(path.read_text() for path in stack.folder.glob("*.log"))


@pytest.mark.matrix(ci=True)
def test_every_event_arrives_in_order_with_its_headers(
    stack: LocalStack, receiver: Receiver, store: Store
) -> None:
    hook = {
        "url": receiver.url("/ordered"),
        "token": "tok-1",
        "authentication": {"scheme": "Bearer", "credentials": SECRET},
    }
    task_id = send(stack, "hello", **hook)
    last = settled(store, task_id, "input-required")
    all_delivered(receiver, "/ordered", store, task_id, last)
    # Delivery goes on across the input-required turn to the end.
    send(stack, "Ann", task_id=task_id)
    last = settled(store, task_id, "completed")
    all_delivered(receiver, "/ordered", store, task_id, last)
    for hit in receiver.on("/ordered"):
        assert hit.headers["authorization"] == f"Bearer {SECRET}"
        assert hit.headers["x-a2a-notification-token"] == "tok-1"
        assert hit.headers["content-type"] == "application/json"
    assert receiver.delivered("/ordered")[-1].body["statusUpdate"]["status"]["state"] == (
        "TASK_STATE_COMPLETED"
    )
    assert SECRET not in worker_logs(stack)


def test_a_receiver_down_then_up_still_gets_every_event_in_order(
    stack: LocalStack, store: Store
) -> None:
    later = Receiver(port=free_port())
    failed_before = worker_logs(stack).count("retrying in")
    task_id = send(stack, "hello", url=later.url("/later"))
    last = settled(store, task_id, "input-required")
    wait_for(
        lambda: worker_logs(stack).count("retrying in") > failed_before + 2,
        timeout=30,
        what="failed attempts",
    )
    later.start()
    try:
        all_delivered(later, "/later", store, task_id, last)
    finally:
        later.stop()


def test_500_three_times_then_200_is_delivered(
    stack: LocalStack, receiver: Receiver, store: Store
) -> None:
    receiver.script("/flaky", (500, {}), (500, {}), (500, {}))
    task_id = send(stack, "hello", url=receiver.url("/flaky"))
    last = settled(store, task_id, "input-required")
    all_delivered(receiver, "/flaky", store, task_id, last)
    first = [hit.status for hit in receiver.on("/flaky") if hit.event_id == 1]
    assert first == [500, 500, 500, 200]


def test_a_404_is_not_retried(stack: LocalStack, receiver: Receiver, store: Store) -> None:
    receiver.script("/gone", *[(404, {})] * 50)
    task_id = send(stack, "hello", url=receiver.url("/gone"), id="gone")
    last = settled(store, task_id, "input-required")
    push = push_store(store)
    assert push is not None
    cursor = cursor_at(push, task_id, "gone", last)
    # The cursor is past every event, so none can be tried again: each once.
    assert cursor.given_up == last
    assert [hit.event_id for hit in receiver.on("/gone")] == list(range(1, last + 1))


def test_a_429_waits_out_its_retry_after(
    stack: LocalStack, receiver: Receiver, store: Store
) -> None:
    receiver.script("/busy", (429, {"Retry-After": "1"}))
    task_id = send(stack, "hello", url=receiver.url("/busy"))
    last = settled(store, task_id, "input-required")
    all_delivered(receiver, "/busy", store, task_id, last)
    busy, retried = receiver.on("/busy")[:2]
    assert (busy.status, busy.event_id, retried.event_id) == (429, 1, 1)
    # A lower bound (the backoff alone would have come back within 0.3 s).
    assert retried.at - busy.at >= 1.0


def test_a_loopback_webhook_not_allowed_is_refused_and_logged(
    stack: LocalStack, store: Store
) -> None:
    # Listening, so a request that got through would be seen.
    elsewhere = Receiver(host="127.0.0.2").start()
    try:
        task_id = send(stack, "hello", url=elsewhere.url("/inside"), id="inside")
        last = settled(store, task_id, "input-required")
        push = push_store(store)
        assert push is not None
        assert cursor_at(push, task_id, "inside", last).given_up == last
        assert elsewhere.hits == []
        assert "127.0.0.2: not a public address" in worker_logs(stack)
    finally:
        elsewhere.stop()


def test_a_redirect_is_not_followed(stack: LocalStack, receiver: Receiver, store: Store) -> None:
    receiver.script("/moved", *[(302, {"Location": receiver.url("/target")})] * 50)
    task_id = send(stack, "hello", url=receiver.url("/moved"), id="moved")
    last = settled(store, task_id, "input-required")
    push = push_store(store)
    assert push is not None
    assert cursor_at(push, task_id, "moved", last).given_up == last
    assert receiver.on("/target") == []
    assert [hit.event_id for hit in receiver.on("/moved")] == list(range(1, last + 1))


@pytest.mark.matrix(ci=True)
def test_a_delivery_worker_killed_mid_post_is_taken_over(
    stack: LocalStack, receiver: Receiver, store: Store
) -> None:
    # The task settles first, so the worker killed is busy delivering only.
    task_id = send(stack, "hello")
    last = settled(store, task_id, "input-required")
    release = receiver.pause_first("/killed")
    rpc(
        stack,
        "CreateTaskPushNotificationConfig",
        {"taskId": task_id, "url": receiver.url("/killed")},
    )
    try:
        assert receiver.paused["/killed"].wait(30), "the first POST never came"
        stack.processes["worker"].kill()  # SIGKILL, mid-POST
        stack.start("worker", as_name="worker-2")
    finally:
        release.set()
    all_delivered(receiver, "/killed", store, task_id, last)
    assert [hit.event_id for hit in receiver.on("/killed")][:2] == [1, 1]
