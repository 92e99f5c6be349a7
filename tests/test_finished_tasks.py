"""GetTask answers a finished task from the front end's memory, and only a
finished one: against compose's own front end (gunicorn, one worker
process) on a private Redis, the tasks moved through their states from this
process through the store contract, as a worker moves them.

Redis stopped proves where an answer came from: a finished task the front
end has read is still answered (and checked for its owner and trimmed by
historyLength as before); a running one, or any with the cache off, gets
`task store unavailable`. A short TOOLNEXUS_TASK_TTL proves the memory
forgets a task no later than the store does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from shared.codec import encode_bytes
from shared.events import to_state
from shared.store.contract import Store
from shared.store.resolve import resolve_store
from shared.task import COMPLETED, WORKING, new_task
from shared.transitions import transition
from tests.support.compose import LocalStack, local_stack
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer
from web.core.errors import STORE_UNAVAILABLE
from web.core.finished import FinishedTasks

pytestmark = pytest.mark.timeout(120)

TOKENS = {"alice": "alice-token", "bob": "bob-token"}


def get(url: str, task_id: str, who: str = "alice", **params: Any) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "GetTask",
        "params": {"id": task_id, **params},
    }
    headers = {"Authorization": f"Bearer {TOKENS[who]}", "A2A-Version": "1.0"}
    reply: dict[str, Any] = requests.post(f"{url}/", json=body, headers=headers, timeout=30).json()
    return reply


def send(url: str, text: str) -> str:
    """A non-blocking send as alice (no worker runs: the task waits, submitted)."""
    message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message, "configuration": {"returnImmediately": True}},
    }
    headers = {"Authorization": f"Bearer {TOKENS['alice']}", "A2A-Version": "1.0"}
    reply = requests.post(f"{url}/", json=body, headers=headers, timeout=30).json()
    assert "result" in reply, reply
    task_id: str = reply["result"]["task"]["id"]
    return task_id


def finish(store: Store, task_id: str) -> None:
    """What a worker does to a submitted task: claim it, then complete it."""
    for step in (WORKING, COMPLETED):
        assert transition(store, task_id, to_state(step)).applied, step


def serving(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=5).status_code == 200
    except (requests.ConnectionError, requests.Timeout):
        return False


def state(reply: dict[str, Any]) -> str:
    assert "result" in reply, reply
    found: str = reply["result"]["status"]["state"]
    return found


def store_error(reply: dict[str, Any]) -> bool:
    return "error" in reply and reply["error"]["message"].startswith(STORE_UNAVAILABLE)


@pytest.fixture
def stack(
    tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[RedisServer, LocalStack]]:
    settings = {
        "TOOLNEXUS_API_TOKENS": ",".join(f"{who}:{token}" for who, token in TOKENS.items()),
        **getattr(request, "param", {}),
    }
    with local_stack(tmp_path, settings, appendonly=True) as (redis, served):
        served.start("web", WEB_CONCURRENCY="1")
        wait_for(lambda: serving(served.web_url), timeout=60, what="the front end to answer")
        yield redis, served


def test_a_finished_task_is_answered_from_memory_and_a_running_one_never(
    stack: tuple[RedisServer, LocalStack],
) -> None:
    redis, served = stack
    url, store = served.web_url, served.open_store()
    finished, running = send(url, "finishes"), send(url, "keeps running")
    # Each state the workers write is what the next GetTask sees.
    assert state(get(url, finished)) == "TASK_STATE_SUBMITTED"
    transition(store, finished, to_state(WORKING))
    assert state(get(url, finished)) == "TASK_STATE_WORKING"
    transition(store, finished, to_state(COMPLETED))
    assert state(get(url, finished)) == "TASK_STATE_COMPLETED"
    transition(store, running, to_state(WORKING))
    assert state(get(url, running)) == "TASK_STATE_WORKING"
    redis.stop()
    try:
        whole = get(url, finished)
        assert state(whole) == "TASK_STATE_COMPLETED"
        assert len(whole["result"]["history"]) == 1
        # historyLength and the owner check apply to an answer from memory too.
        assert "history" not in get(url, finished, historyLength=0)["result"]
        assert get(url, finished, who="bob")["error"]["code"] == -32001
        assert store_error(get(url, running)), "a running task was answered without the store"
    finally:
        redis.start()
    assert state(get(url, running)) == "TASK_STATE_WORKING"


@pytest.mark.parametrize("stack", [{"TOOLNEXUS_FINISHED_CACHE_MB": "0"}], indirect=True)
def test_with_the_cache_off_every_get_asks_the_store(
    stack: tuple[RedisServer, LocalStack],
) -> None:
    redis, served = stack
    url, store = served.web_url, served.open_store()
    task_id = send(url, "finishes")
    finish(store, task_id)
    assert state(get(url, task_id)) == "TASK_STATE_COMPLETED"
    redis.stop()
    try:
        assert store_error(get(url, task_id))
    finally:
        redis.start()


@pytest.mark.parametrize("stack", [{"TOOLNEXUS_TASK_TTL": "2"}], indirect=True)
def test_the_memory_forgets_a_finished_task_no_later_than_the_store(
    stack: tuple[RedisServer, LocalStack],
) -> None:
    _, served = stack
    # The store as a worker opens it, expiring what it finishes (the TTL).
    url, store = served.web_url, resolve_store(served.store_url, terminal_ttl=2)
    task_id = send(url, "finishes")
    finish(store, task_id)
    assert state(get(url, task_id)) == "TASK_STATE_COMPLETED"  # read, so kept
    try:
        wait_for(lambda: store.get(task_id) is None, timeout=30, what="Redis to expire the task")
    finally:
        store.close()
    assert get(url, task_id)["error"]["code"] == -32001


def finished_task(text: str, timestamp: str | None = None) -> Any:
    task: Any = new_task({"role": "user", "messageId": text, "parts": [{"text": text}]})
    task["status"] = {"state": COMPLETED}
    if timestamp is not None:
        task["status"]["timestamp"] = timestamp
    return task


def test_the_memory_keeps_within_its_budget_dropping_the_least_recently_read() -> None:
    tasks = [finished_task(f"task {n:03}") for n in range(100)]
    one = len(encode_bytes(tasks[0]))
    kept = FinishedTasks(budget=10 * one + one // 2, ttl=None)
    for task in tasks[:10]:
        kept.keep(task)
    assert len(kept) == 10 and kept.size <= kept.budget
    # Each caller gets a copy of its own: changing one changes nothing kept.
    copy = kept.get(tasks[5]["id"])
    assert copy == tasks[5] and copy is not tasks[5]
    copy["status"]["state"] = WORKING
    assert kept.get(tasks[5]["id"]) == tasks[5]
    assert kept.get(tasks[0]["id"]) == tasks[0]  # read: now the most recent
    for task in tasks[10:]:
        kept.keep(task)
        assert kept.size <= kept.budget
    assert len(kept) == 10
    assert kept.get(tasks[0]["id"]) is None  # pushed out by ninety later ones
    assert kept.get(tasks[99]["id"]) == tasks[99]
    # A task larger than a tenth of the budget is not kept at all.
    large = finished_task("x" * (kept.budget // 10))
    kept.keep(large)
    assert kept.get(large["id"]) is None
    # Nor is an unfinished one.
    working = finished_task("working")
    working["status"] = {"state": WORKING}
    kept.keep(working)
    assert kept.get(working["id"]) is None


def test_the_memory_counts_the_time_to_live_from_when_the_task_finished() -> None:
    now = [1_800_000_000.0]  # 2027-01-15T08:00:00Z
    kept = FinishedTasks(budget=2**20, ttl=60, clock=lambda: now[0])
    old = finished_task("finished 50 s ago", "2027-01-15T07:59:10Z")
    fresh = finished_task("finished now", "2027-01-15T08:00:00+00:00")
    unstamped = finished_task("no timestamp")
    for task in (old, fresh, unstamped):
        kept.keep(task)
    now[0] += 11  # past the old one's 60 s, counted from its timestamp
    assert kept.get(old["id"]) is None
    assert kept.get(fresh["id"]) == fresh and kept.get(unstamped["id"]) == unstamped
    now[0] += 50
    assert kept.get(fresh["id"]) is None and kept.get(unstamped["id"]) is None
    assert len(kept) == 0 and kept.size == 0
