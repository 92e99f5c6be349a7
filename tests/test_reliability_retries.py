"""Scenario: a client that did not hear back sends the same message again.

A2A's messageId is the client's own, unique per message, so a send whose
messageId this caller already sent is the same message: the service answers
with the task that message created, and the agent runs once. And once a
task is saved, every error of that request names it (`data.taskId`), so a
client can ask GetTask instead of sending again.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from shared.settings import Settings
from shared.stores.redis.store import redis_store
from shared.task import COMPLETED, state_of
from tests.support.a2a import call, wait_ready
from tests.support.compose import LocalStack, local_stack
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer
from tests.support.store_kinds import Stores, for_many_trials
from web.core.params import SendParams, send_params
from web.core.tasks import Tasks

SETTINGS = {
    "TOOLNEXUS_RUN": "examples.agents:slow",
    "TOOLNEXUS_HEARTBEAT": "0.3",
    "TOOLNEXUS_STALE_AFTER": "10",
    "TOOLNEXUS_REAP_EVERY": "0.5",
}


def message(text: str, message_id: str | None = None) -> dict[str, Any]:
    return {
        "role": "user",
        "messageId": message_id or str(uuid.uuid4()),
        "parts": [{"kind": "text", "text": text}],
    }


def claims(store: Any, task_id: str) -> int:
    """How many times the task was claimed (submitted -> working): one per run."""
    return sum(
        1
        for _, event in store.events(task_id, 0)
        if event["kind"] == "status-update" and event["status"]["state"] == "working"
    )


def tasks_of(store: Any, message_id: str) -> list[str]:
    return [
        task_id
        for task_id, task in store.all().items()
        if task["history"][0]["messageId"] == message_id
    ]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[RedisServer, LocalStack]]:
    with local_stack(tmp_path, SETTINGS, appendonly=True) as (redis, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("worker")
        stack.start("beat")
        wait_ready(stack.web_url)
        yield redis, stack


def test_a_redis_blip_during_a_blocking_send_names_the_task_and_the_retry_runs_nothing_twice(
    stack: tuple[RedisServer, LocalStack],
) -> None:
    redis, services = stack
    store = redis_store(services.store_url)
    sent = message("3 blip")  # the agent runs 3 s: the outage begins while it runs
    replies: list[dict[str, Any]] = []
    sender = threading.Thread(
        target=lambda: replies.append(call(services.web_url, "message/send", {"message": sent}, 30))
    )
    sender.start()
    (task_id,) = wait_for(
        lambda: tasks_of(store, sent["messageId"]), timeout=10, what="the task to be saved"
    )
    # Claimed, so queued: the request now waits on the store for the outcome.
    wait_for(lambda: claims(store, task_id) == 1, timeout=10, what="a worker to claim the task")
    redis.stop()  # the blip: Redis stays down until the blocked send has answered
    sender.join(40)
    redis.start()
    assert replies, "the blocked send did not answer during the outage"
    (first,) = replies
    # The wait meets the outage (losing Redis wakes every waiter to re-read)...
    assert "error" in first, first
    assert first["error"]["message"] == "task store unavailable", first
    # ...and says which task it was about.
    assert first["error"].get("data", {}).get("taskId") == task_id, first
    # The client retries the same message: the same task, completed, run once.
    again = call(services.web_url, "message/send", {"message": sent}, 30)["result"]
    assert again["id"] == task_id
    wait_for(lambda: state_of(store.get(task_id)) == COMPLETED, timeout=20, what="completion")
    assert tasks_of(store, sent["messageId"]) == [task_id]
    assert claims(store, task_id) == 1


def test_a_front_end_killed_during_a_blocking_send_then_a_retry_runs_once(
    stack: tuple[RedisServer, LocalStack],
) -> None:
    _, services = stack
    store = redis_store(services.store_url)
    sent = message("2 long enough to kill the front end meanwhile")
    outcome: list[Any] = []

    def send() -> None:
        try:
            outcome.append(call(services.web_url, "message/send", {"message": sent}, 30))
        except requests.RequestException as error:
            outcome.append(error)

    sender = threading.Thread(target=send)
    sender.start()
    wait_for(lambda: tasks_of(store, sent["messageId"]), timeout=10, what="the task to be saved")
    services.processes["web"].kill()  # SIGKILL, mid-request
    sender.join(30)
    assert isinstance(outcome[0], requests.RequestException)  # the connection dropped
    services.start("web", WEB_CONCURRENCY="1")
    wait_ready(services.web_url)
    retried = call(services.web_url, "message/send", {"message": sent}, 30)["result"]
    assert retried["status"]["state"] == COMPLETED  # the retry waits for it, as blocking sends do
    assert tasks_of(store, sent["messageId"]) == [retried["id"]]
    assert claims(store, retried["id"]) == 1


class Inert:
    def enqueue(self, task_id: str) -> None: ...

    def revoke(self, task_id: str) -> None: ...

    def check(self) -> None: ...


@pytest.mark.parametrize("store_kind", for_many_trials())
def test_the_same_message_from_twenty_clients_at_once_creates_one_task(
    store_kind: str, stores: Stores
) -> None:
    store = stores.open(store_kind)
    trials = 1000 if store_kind == "redis" else 300
    tasks = Tasks(Settings(), store, Inert())
    barrier = threading.Barrier(20)
    duplicates = 0
    for trial in range(trials):
        params = send_params({"message": message("race", f"race-{trial}")})
        answers: list[str] = []

        def client(params: SendParams = params, answers: list[str] = answers) -> None:
            barrier.wait()
            answers.append(tasks.accept(params, "").task["id"])

        clients = [threading.Thread(target=client) for _ in range(20)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(30)
        duplicates += len(set(answers)) - 1
        assert len(answers) == 20
    print(f"\n{store_kind}: {trials} trials x 20 concurrent sends, {duplicates} duplicate tasks")
    assert duplicates == 0
    assert len(store.all()) == trials
