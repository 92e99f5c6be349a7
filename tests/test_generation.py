"""A2A 1.1's task generation, long-poll GetTask and ifGenerationMatch, over
real HTTP on every built-in store, with the agent run by the in-process
workers; and what 1.0 and 0.3 peers read, unchanged byte for byte."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import requests

from shared import Settings
from shared.events import to_state
from shared.generation import generation_of
from shared.store.contract import Store
from shared.store.resolve import resolve_store
from shared.stores.redis.store import redis_store
from shared.task import INPUT_REQUIRED, WORKING, agent_message, new_task, text_message
from shared.transitions import transition
from tests.support.agents import gate
from tests.support.sse import Stream, results
from tests.support.store_kinds import Stores
from tests.test_web_support import live_server
from web import create_app
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher

V11 = {"A2A-Version": "1.1"}


@pytest.fixture
def store(store_kind: str, stores: Stores) -> Store:
    return resolve_store(stores.url(store_kind))


def serve(store: Store, run: str, **settings: Any) -> Any:
    """The front end over real HTTP with `run` on in-process workers."""
    config = Settings(run=run, **settings)
    dispatcher = InProcessDispatcher(store, load_agent(config), config, threads=2)
    return _Served(live_server(create_app(config, store=store, dispatcher=dispatcher)), dispatcher)


class _Served:
    def __init__(self, served: Any, dispatcher: InProcessDispatcher) -> None:
        self._served, self._dispatcher = served, dispatcher

    def __enter__(self) -> str:
        url, _ = self._served.__enter__()
        return str(url)

    def __exit__(self, *exc: object) -> None:
        self._served.__exit__(None, None, None)
        self._dispatcher.close(timeout=5)


def call(url: str, method: str, params: dict[str, Any], version: str | None = "1.1") -> Any:
    headers = {"A2A-Version": version} if version else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return requests.post(f"{url}/", json=body, headers=headers, timeout=30).json()


def message(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "role": "ROLE_USER",
        "messageId": f"m-{time.time_ns()}",
        "parts": [{"text": text}],
    } | extra


def generations(events: list[dict[str, Any]]) -> list[int]:
    """The generation each status or artifact update of a 1.1 stream carries."""
    found = []
    for event in events:
        for kind in ("statusUpdate", "artifactUpdate"):
            if kind in event:
                assert isinstance(event[kind]["generation"], str)  # ProtoJSON's int64
                found.append(int(event[kind]["generation"]))
    return found


def test_the_generation_runs_on_by_one_through_a_whole_life(store: Store) -> None:
    with serve(store, "tests.support.agents:rich") as url:
        stream = list(
            Stream(url, "SendStreamingMessage", {"message": message("go")}, version="1.1")
        )
        payloads = results(stream)
        first = payloads[0]["task"]
        assert first["generation"] == "1"
        seen = generations(payloads[1:])
        # status working, progress, three chunks, input-required: one each
        assert seen == list(range(2, 2 + len(seen))) and len(seen) >= 6
        task_id = first["id"]
        got = call(url, "GetTask", {"id": task_id})["result"]
        assert got["generation"] == str(seen[-1])
        assert got["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

        # A follow-up that expects another generation is refused, and writes nothing.
        stale = message("again", taskId=task_id)
        refused = call(
            url, "SendMessage", {"message": stale, "configuration": {"ifGenerationMatch": "1"}}
        )
        assert refused["error"]["code"] == -32010
        (info,) = refused["error"]["data"]
        assert info["reason"] == "TASK_GENERATION_MISMATCH"
        assert info["metadata"] == {
            "taskId": task_id,
            "expectedGeneration": "1",
            "currentGeneration": str(seen[-1]),
        }
        assert call(url, "GetTask", {"id": task_id})["result"]["generation"] == got["generation"]

        # A stream resumed from the middle carries the same numbers again.
        resumed = Stream(
            url, "SubscribeToTask", {"id": task_id}, version="1.1", last_event_id=stream[3].id
        )
        assert generations(results(list(resumed))) == seen[3:]

        # The follow-up that expects the task as it stands goes through, and
        # the rest of the life runs on from there.
        answer = message("again", taskId=task_id)
        config = {"ifGenerationMatch": got["generation"], "returnImmediately": True}
        assert (
            "task"
            in call(url, "SendMessage", {"message": answer, "configuration": config})["result"]
        )
        rest = Stream(
            url, "SubscribeToTask", {"id": task_id}, version="1.1", last_event_id=stream[-1].id
        )
        later = generations(results(list(rest)))
        # submitted, working, a chunk, completed
        assert later == list(range(seen[-1] + 1, seen[-1] + 5))
        final = call(url, "GetTask", {"id": task_id})["result"]
        assert final["status"]["state"] == "TASK_STATE_COMPLETED"
        assert final["generation"] == str(later[-1])

        # Cancel is one mutation more: submitted 1, working 2, canceled 3.
        name = f"cancel-{time.time_ns()}"
        sent = {"message": message(f"wait {name}"), "configuration": {"returnImmediately": True}}
        waiting_id = call(url, "SendMessage", sent)["result"]["task"]["id"]
        try:
            working = _until(
                url, waiting_id, lambda t: t["status"]["state"] == "TASK_STATE_WORKING"
            )
            assert working["generation"] == "2"
            canceled = call(url, "CancelTask", {"id": waiting_id})["result"]
            assert canceled["generation"] == "3"
            assert call(url, "GetTask", {"id": waiting_id})["result"]["generation"] == "3"
        finally:
            gate(name)[1].set()


def _until(url: str, task_id: str, done: Any, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task: dict[str, Any] = call(url, "GetTask", {"id": task_id, "currentGeneration": "0"})[
            "result"
        ]
        if done(task):
            return task
        # A long-poll until the next change: no sleep, and no change missed.
        call(url, "GetTask", {"id": task_id, "currentGeneration": task["generation"]})
    raise AssertionError(f"task {task_id} never got there")


@pytest.mark.parametrize(
    "version,path",
    [(None, "/"), ("0.3", "/"), ("1.0", "/"), ("1.0", "rest")],
    ids=["toolnexus", "0.3", "1.0", "http+json-1.0"],
)
def test_older_peers_read_the_same_bytes_as_before_generations(
    version: str | None, path: str
) -> None:
    """The task as an older peer reads it, byte for byte, is what the same
    task kept without a generation reads as: the field never reaches it."""
    store = resolve_store("memory")
    with serve(store, "examples.agents:echo") as url:
        sent = call(url, "SendMessage", {"message": message("hi")}, version="1.0")
        task_id = sent["result"]["task"]["id"]

        def raw() -> bytes:
            if path == "rest":
                got = requests.get(
                    f"{url}/tasks/{task_id}", headers={"A2A-Version": "1.0"}, timeout=10
                )
                return got.content
            body = {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "GetTask" if version != "0.3" else "tasks/get",
                "params": {"id": task_id},
            }
            headers = {"A2A-Version": version} if version else {}
            return requests.post(f"{url}/", json=body, headers=headers, timeout=10).content

        with_generation = raw()
        assert b"generation" not in with_generation
        kept = store.get(task_id)
        assert kept is not None and generation_of(kept) >= 3
        store.save({key: value for key, value in kept.items() if key != "generation"})  # type: ignore[misc]
        assert "generation" not in (store.get(task_id) or {})
        assert raw() == with_generation
        # and a stream of a new task carries none either
        events = list(
            Stream(url, "SendStreamingMessage", {"message": message("yo")}, version=version)
        )
        assert all("generation" not in json.dumps(event.data) for event in events) and events


def test_a_long_poll_answers_at_once_when_behind_and_when_a_10_peer_asks() -> None:
    store = resolve_store("memory")
    with serve(store, "examples.agents:echo") as url:
        task = call(url, "SendMessage", {"message": message("hi")})["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        started = time.monotonic()
        behind = call(url, "GetTask", {"id": task["id"], "currentGeneration": "1"})["result"]
        assert behind["generation"] == task["generation"]
        # A 1.0 peer's unknown field is ignored, as it always was.
        older = call(url, "GetTask", {"id": task["id"], "currentGeneration": "99"}, version="1.0")
        assert "generation" not in older["result"]
        # A finished task never changes: even "99" is answered at once.
        assert call(url, "GetTask", {"id": task["id"], "currentGeneration": "99"})["result"]
        assert time.monotonic() - started < 10  # (none of them waited out the 30 s long-poll)


def test_a_long_poll_waits_until_another_process_changes_the_task(redis_url: str) -> None:
    store = redis_store(redis_url)
    task_id = store.create(new_task(text_message("user", "go"))).task["id"]
    assert transition(store, task_id, to_state(WORKING)).applied
    with serve(store, "examples.agents:echo", long_poll_timeout=0.5) as url:
        # Nothing changes: the wait ends at TOOLNEXUS_LONG_POLL_TIMEOUT with the task as it stands.
        timed_out = call(url, "GetTask", {"id": task_id, "currentGeneration": "2"})["result"]
        assert timed_out["generation"] == "2"
    with serve(store, "examples.agents:echo") as url:
        answered: dict[str, Any] = {}
        polling = threading.Thread(
            target=lambda: answered.update(
                call(url, "GetTask", {"id": task_id, "currentGeneration": "2"}, version="1.1")
            )
        )
        polling.start()
        # REST long-polls too; the change comes from a plain process of its own.
        rest: dict[str, Any] = {}
        rest_thread = threading.Thread(
            target=lambda: rest.update(
                requests.get(
                    f"{url}/tasks/{task_id}?currentGeneration=2", headers=V11, timeout=30
                ).json()
            )
        )
        rest_thread.start()
        writer = (
            "import sys; from shared.stores.redis.store import redis_store;"
            "from shared.events import artifact_update; from shared.transitions import transition;"
            "s = redis_store(sys.argv[1]);"
            "a = {'artifactId': 'a', 'parts': [{'kind': 'text', 'text': 'x'}]};"
            "assert transition(s, sys.argv[2], lambda t: [artifact_update(t, a)]).applied"
        )
        time.sleep(0.3)  # both polls wait by now (or answer the change: the same result)
        subprocess.run([sys.executable, "-c", writer, redis_url, task_id], check=True, timeout=30)
        polling.join(30)
        rest_thread.join(30)
        assert answered["result"]["generation"] == "3"
        assert answered["result"]["artifacts"][0]["parts"] == [{"text": "x"}]
        assert rest["generation"] == "3"


def test_a_refused_follow_up_is_409_aborted_on_http_json(redis_url: str) -> None:
    store = redis_store(redis_url)
    task_id = store.create(new_task(text_message("user", "go"))).task["id"]
    assert transition(store, task_id, to_state(WORKING)).applied
    assert transition(store, task_id, to_state(INPUT_REQUIRED, agent_message("?"))).applied
    with serve(store, "examples.agents:echo") as url:
        body = {"message": message("a", taskId=task_id), "configuration": {"ifGenerationMatch": 2}}
        got = requests.post(f"{url}/message:send", json=body, headers=V11, timeout=10)
        assert got.status_code == 409
        error = got.json()["error"]
        assert error["status"] == "ABORTED" and error["code"] == 409
        assert (
            error["message"] == "Task generation mismatch: expected 2 but current generation is 3"
        )
        assert error["details"][0]["metadata"]["currentGeneration"] == "3"
        # A 1.0 peer's field is ignored: the follow-up is taken.
        older = requests.post(
            f"{url}/message:send", json=body, headers={"A2A-Version": "1.0"}, timeout=10
        )
        assert older.status_code == 200


def test_a_long_poll_is_owner_scoped() -> None:
    store = resolve_store("memory")
    with serve(store, "examples.agents:echo", api_tokens=("alice:tok-a", "bob:tok-b")) as url:
        headers = {"A2A-Version": "1.1", "Authorization": "Bearer tok-a"}
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage"}
        sent = {"message": message("hi"), "configuration": {"returnImmediately": True}}
        task = requests.post(f"{url}/", json={**body, "params": sent}, headers=headers, timeout=10)
        task_id = task.json()["result"]["task"]["id"]
        poll = {"id": task_id, "currentGeneration": "99"}
        asked = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": poll}
        headers["Authorization"] = "Bearer tok-b"
        reply = requests.post(f"{url}/", json=asked, headers=headers, timeout=10).json()
        assert reply["error"]["code"] == -32001  # bob is told of no such task, and it does not wait
