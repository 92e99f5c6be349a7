"""Event numbers are never reused, nor generations shown twice for different
content, even by a Redis that lost its last writes.

A real redis-server with AOF `everysec` (what compose runs) is killed with
SIGKILL right after a burst of events, and restarted; in one case the last
part of its AOF is cut off first, as a lost second leaves it. A client
holding an event id from before the crash then resumes (the store's
follower, and SubscribeToTask with Last-Event-ID over HTTP): every event
written after the restart reaches it, in the Task or as an event; none is
skipped because it took a number the client had already seen."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared import Settings
from shared.events import artifact_update, to_state
from shared.generation import generation_of
from shared.store.contract import Record, TaskStore
from shared.store.follow import follow
from shared.store.listing import Query
from shared.stores.redis.store import redis_store
from shared.task import COMPLETED, WORKING, new_task, text_message
from shared.transitions import transition
from tests.support.redis_server import RedisServer
from tests.support.sse import Stream, results
from tests.test_web_support import live_server
from web import create_app
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher

BURST = 300


@pytest.fixture
def server() -> Iterator[RedisServer]:
    try:
        started = RedisServer(appendonly=True, appendfsync="everysec").start()
    except (FileNotFoundError, RuntimeError, TimeoutError) as error:
        pytest.skip(f"NO REDIS: cannot start a private redis-server ({error})")
    yield started
    started.close()


def chunk(store: TaskStore, task_id: str, text: str) -> None:
    artifact = {"artifactId": "a-1", "parts": [{"kind": "text", "text": text}]}
    change = lambda t: [artifact_update(t, artifact, append=True, last_chunk=False)]  # type: ignore[arg-type]  # noqa: E731
    assert transition(store, task_id, change).applied


def aof(server: RedisServer) -> Path:
    """The file Redis appends to now (Redis 7 keeps a base and an incr file)."""
    (incr,) = (server.directory / "appendonlydir").glob("*.incr.aof")
    return incr


def texts(task: Any) -> list[str]:
    return [part["text"] for artifact in task.get("artifacts", []) for part in artifact["parts"]]


@pytest.mark.parametrize("cut", [False, True], ids=["as-killed", "last-writes-lost"])
def test_a_resume_from_before_a_crash_never_skips_an_event_written_after_it(
    server: RedisServer, cut: bool
) -> None:
    store = redis_store(f"{server.url}/0")
    task_id = store.create(new_task(text_message("user", "go"))).task["id"]
    assert transition(store, task_id, to_state(WORKING)).applied
    for n in range(BURST // 2):
        chunk(store, task_id, f"before-{n}")
    kept = aof(server).stat().st_size  # what a lost second would leave
    for n in range(BURST // 2, BURST):
        chunk(store, task_id, f"before-{n}")
    seen = store.read(task_id).seq  # type: ignore[union-attr]  # the client's Last-Event-ID
    server.kill()
    if cut:
        with aof(server).open("r+b") as file:
            file.truncate(kept)
    server.start()
    store = redis_store(f"{server.url}/0")
    restarted = store.read(task_id)
    assert restarted is not None
    if cut:
        assert restarted.seq < seen  # numbers after it were handed out, then lost
    # The agent goes on after the restart.
    after = [f"after-{n}" for n in range(5)]
    for text in after:
        chunk(store, task_id, text)
    assert transition(store, task_id, to_state(COMPLETED)).applied

    # The store's follower, from the pre-crash number.
    check_followed(store, task_id, seen, after)

    # The same through the API: SubscribeToTask with Last-Event-ID.
    check_resumed_over_http(store, task_id, seen, after)


def check_followed(store: TaskStore, task_id: str, seen: int, after: list[str]) -> None:
    """The store's follower from `seen` on the finished task: every text in
    `after` reaches it, in the Task or as an event, and it starts with the
    Task, numbered above `seen`."""
    delivered: list[str] = []
    items = list(follow(store, task_id, seen, deadline=time.monotonic() + 10, reader="crash"))
    for item in items:
        if isinstance(item, Record):
            delivered += texts(item.task)
        elif item is not None and item[1]["kind"] == "artifact-update":
            delivered += [part["text"] for part in item[1]["artifact"]["parts"]]  # type: ignore[typeddict-item]
    assert set(after) <= set(delivered)
    assert isinstance(items[0], Record)  # a new lineage: the old number means nothing now
    assert items[0].seq > seen


def check_resumed_over_http(store: TaskStore, task_id: str, seen: int, after: list[str]) -> None:
    """SubscribeToTask with `Last-Event-ID: seen` on the finished task: the
    Task (numbered above `seen`) holding every text in `after`."""
    config = Settings(run="examples.agents:echo")
    dispatcher = InProcessDispatcher(store, load_agent(config), config, threads=1)
    served = live_server(create_app(config, store=store, dispatcher=dispatcher))
    url, _ = served.__enter__()
    try:
        stream = list(Stream(url, "SubscribeToTask", {"id": task_id}, last_event_id=seen))
    finally:
        served.__exit__(None, None, None)
        dispatcher.close(timeout=5)
    payloads = results(stream)
    assert "task" in payloads[0]
    shown = [part["text"] for a in payloads[0]["task"]["artifacts"] for part in a["parts"]]
    assert set(after) <= set(shown)
    assert stream[0].id is not None and stream[0].id > seen


def test_numbers_run_on_by_one_while_the_same_redis_runs(server: RedisServer) -> None:
    store = redis_store(f"{server.url}/0")
    task_id = store.create(new_task(text_message("user", "go"))).task["id"]
    assert transition(store, task_id, to_state(WORKING)).applied
    chunk(store, task_id, "x")
    store.client.save()  # a snapshot moves LASTSAVE: the run is asked, and is the same
    time.sleep(1.1)  # (then a write more than a second after it takes the short way)
    chunk(store, task_id, "w")
    chunk(store, task_id, "v")
    assert [seq for seq, _ in store.events(task_id, 0)] == [1, 2, 3, 4, 5]
    server.stop()  # a clean restart: the numbering cannot know it lost nothing
    server.start()
    store = redis_store(f"{server.url}/0")
    chunk(store, task_id, "y")
    chunk(store, task_id, "z")
    numbers = [seq for seq, _ in store.events(task_id, 0)]
    assert numbers[:5] == [1, 2, 3, 4, 5]
    assert numbers[5] > 10**15 and numbers[6] == numbers[5] + 1  # a new lineage, then by one


def test_no_generation_is_emitted_twice_across_a_redis_crash(server: RedisServer) -> None:
    """SIGKILL after a burst, the AOF's last writes cut off as a lost second
    leaves it: the writes after the restart carry no generation a reader
    could have seen before with other content (the task says 0: unknown)."""
    store = redis_store(f"{server.url}/0")
    task_id = store.create(new_task(text_message("user", "go"))).task["id"]
    assert transition(store, task_id, to_state(WORKING)).applied
    for n in range(100):
        chunk(store, task_id, f"before-{n}")
    (incr,) = (server.directory / "appendonlydir").glob("*.incr.aof")
    kept = incr.stat().st_size
    for n in range(100, 200):
        chunk(store, task_id, f"before-{n}")
    emitted = {generation_of(e): e for _, e in store.events(task_id, 0) if generation_of(e)}
    assert sorted(emitted) == list(range(1, 203))
    server.kill()
    with incr.open("r+b") as file:
        file.truncate(kept)
    server.start()
    store = redis_store(f"{server.url}/0")
    survived = store.read(task_id)
    assert survived is not None and 3 < generation_of(survived.task) < 202  # writes were lost
    for n in range(5):
        chunk(store, task_id, f"after-{n}")
    after = store.read(task_id)
    assert after is not None and generation_of(after.task) == 0
    for _, event in store.events(task_id, 0):
        generation = generation_of(event)
        if generation:
            assert emitted[generation] == event  # the same content, or no generation at all


def test_a_listing_shows_a_generation_the_task_says_is_unknown(server: RedisServer) -> None:
    """A write that finds its task on a new lineage marks the generation
    unknown (`g` = 0) and returns for the writer to stamp its events again;
    until that write lands (for good, if the writer dies first) the snapshot
    and tail still carry the old generation. A ListTasks page shows the
    task as GetTask does."""
    store = redis_store(f"{server.url}/0")
    task_id = store.create(new_task(text_message("user", "go"))).task["id"]
    assert transition(store, task_id, to_state(WORKING)).applied
    chunk(store, task_id, "one")
    store.client.hset(f"toolnexus:task:{task_id}", "g", "0")  # what the script's `redo` leaves
    record = store.read(task_id)
    assert record is not None and generation_of(record.task) == 0
    page = store.listing(Query("", None, None, None, 10, time.time(), None))
    assert [(task["id"], generation_of(task)) for task in page.tasks] == [(task_id, 0)]
