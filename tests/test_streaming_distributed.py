"""Streams across processes: compose.yaml's own commands on a private Redis.

Two front ends (gunicorn, gevent) that share nothing but Redis, a Celery
worker running the agent in another process, and beat. A stream opened on
either front end sees what the worker saves; subscribers on different
processes see the same events in the same order; a worker killed mid-stream
ends the stream with the reaper's `failed`; Redis going away ends it with
an error event, never a hang.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.stores.redis.store import redis_store
from shared.task import WORKING, state_of
from tests.support.a2a import call, wait_ready
from tests.support.compose import LocalStack, local_stack
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer, free_port
from tests.support.sse import Event, Stream, results

SETTINGS = {
    "TOOLNEXUS_RUN": "examples.agents:countdown",
    "TOOLNEXUS_HEARTBEAT": "0.3",
    "TOOLNEXUS_STALE_AFTER": "2",
    "TOOLNEXUS_REAP_EVERY": "0.5",
    "TOOLNEXUS_KEEPALIVE": "1",
}


@pytest.fixture
def stacked(tmp_path: Path) -> Iterator[tuple[RedisServer, LocalStack, list[str]]]:
    with local_stack(tmp_path, SETTINGS, appendonly=True) as (redis, stack):
        second = free_port()
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start(
            "web",
            as_name="web-b",
            WEB_CONCURRENCY="1",
            GUNICORN_CMD_ARGS=f"--bind=127.0.0.1:{second}",
        )
        stack.start("worker")
        stack.start("beat")
        urls = [stack.web_url, f"http://127.0.0.1:{second}"]
        for url in urls:
            wait_ready(url)
        yield redis, stack, urls


def user(text: str) -> dict[str, Any]:
    return {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}


def start_task(url: str, text: str) -> str:
    return str(call(url, "SendMessage", {"message": user(text)})["result"]["id"])


def read_all(stream: Stream, into: list[Event]) -> threading.Thread:
    def read() -> None:
        into.extend(stream)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


def test_subscribers_on_two_front_ends_see_one_sequence_from_a_worker_elsewhere(
    stacked: tuple[RedisServer, LocalStack, list[str]],
) -> None:
    _, _, (url_a, url_b) = stacked
    task_id = start_task(url_a, "0.3 5")
    seen_a: list[Event] = []
    seen_b: list[Event] = []
    readers = [
        read_all(Stream(url_a, "SubscribeToTask", {"id": task_id}), seen_a),
        read_all(Stream(url_b, "SubscribeToTask", {"id": task_id}), seen_b),
    ]
    for reader in readers:
        reader.join(30)
        assert not reader.is_alive(), "a stream did not close after the terminal state"
    # Each starts with the task as it stood when it subscribed; from the first
    # event both saw, the sequences are the same events, in the same order.
    common = max(seen_a[0].id or 0, seen_b[0].id or 0)
    tail_a = [(e.id, e.data["result"]) for e in seen_a if (e.id or 0) > common]
    tail_b = [(e.id, e.data["result"]) for e in seen_b if (e.id or 0) > common]
    assert tail_a == tail_b and tail_a
    final = results(seen_a)[-1]["statusUpdate"]["status"]["state"]
    assert final == "TASK_STATE_COMPLETED"
    chunks = [
        r["artifactUpdate"]["artifact"]["parts"][0]["text"]
        for r in results(seen_a)
        if "artifactUpdate" in r
    ]
    assert chunks[-1] == "liftoff!"


def test_a_send_stream_on_one_front_end_follows_a_worker_in_another_process(
    stacked: tuple[RedisServer, LocalStack, list[str]],
) -> None:
    _, _, (url_a, _) = stacked
    events = list(Stream(url_a, "SendStreamingMessage", {"message": user("0.05 3")}))
    states = [
        r.get("statusUpdate", r.get("task", {})).get("status", {}).get("state")
        for r in results(events)
    ]
    assert states[0] == "TASK_STATE_SUBMITTED" and states[-1] == "TASK_STATE_COMPLETED"
    assert [e.id for e in events] == list(range(1, len(events) + 1))


def test_a_worker_killed_mid_stream_ends_it_with_the_reapers_failure(
    stacked: tuple[RedisServer, LocalStack, list[str]],
) -> None:
    _, stack, (url_a, _) = stacked
    task_id = start_task(url_a, "1 30")  # thirty one-second steps
    store = redis_store(stack.store_url)
    wait_for(lambda: state_of(store.get(task_id)) == WORKING, timeout=20, what="the claim")
    seen: list[Event] = []
    reader = read_all(Stream(url_a, "SubscribeToTask", {"id": task_id}), seen)
    wait_for(lambda: len(seen) >= 2, timeout=10, what="the stream to carry progress")
    stack.processes["worker"].kill()
    reader.join(30)
    assert not reader.is_alive(), "the stream hung after its worker died"
    last = results(seen)[-1]["statusUpdate"]["status"]
    assert last["state"] == "TASK_STATE_FAILED"
    assert "worker lost" in last["message"]["parts"][0]["text"]


def test_redis_going_away_mid_stream_ends_it_with_an_error_event_not_a_hang(
    stacked: tuple[RedisServer, LocalStack, list[str]],
) -> None:
    redis, _, (url_a, _) = stacked
    task_id = start_task(url_a, "1 30")
    seen: list[Event] = []
    reader = read_all(Stream(url_a, "SubscribeToTask", {"id": task_id}), seen)
    wait_for(lambda: len(seen) >= 1, timeout=10, what="the stream to open")
    redis.stop()
    reader.join(30)
    assert not reader.is_alive(), "the stream hung while Redis was down"
    last = seen[-1].data
    assert "error" in last, last
    assert last["error"]["code"] == -32603
    assert last["error"]["message"] == "task store unavailable"
    assert last["error"]["data"][0]["metadata"]["taskId"] == task_id
    redis.start()
