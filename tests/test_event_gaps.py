"""No silent gap: a reader that asks for events the log no longer holds gets
the task as it stands, then what follows, and the gap is counted; reads come
a page at a time. On every built-in store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from shared import Settings
from shared.events import artifact_update, to_state
from shared.store import follow as follow_module
from shared.store.contract import Record
from shared.store.follow import follow
from shared.stores.memory.store import MemoryStore, memory_store
from shared.task import COMPLETED, WORKING, new_task, text_message
from shared.transitions import transition
from tests.support.sse import Stream, results
from tests.support.store_kinds import Stores
from tests.test_web_streaming import Serve, kinds, serve, user
from tests.test_web_support import live_server
from web import create_app
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher

__all__ = ["serve"]  # a fixture of another suite, used here

LIMIT = 50  # a short log, so a test can write past it quickly
WRITTEN = 400  # events written while the follower is away: well past the limit
SHORT_LOG = 7  # a served task's kept log: of countdown's 11 events, 5 to 11


@pytest.fixture
def store(store_kind: str, stores: Stores) -> Any:
    return stores.open(store_kind, log_limit=LIMIT)


def gaps(reader: str) -> float:
    return REGISTRY.get_sample_value("toolnexus_event_gaps_total", {"reader": reader}) or 0.0


def chunks(store: Any, task_id: str, count: int) -> None:
    artifact = {"artifactId": "a-1", "parts": [{"kind": "text", "text": "x"}]}
    for _ in range(count):
        change = lambda t: [artifact_update(t, artifact, append=True, last_chunk=False)]  # type: ignore[arg-type]  # noqa: E731
        assert transition(store, task_id, change).applied


def trimmed(store: Any, task_id: str) -> int:
    """Where the task's log starts now."""
    first = store.events(task_id, 0, 1)
    return int(first[0][0])


def test_a_follower_behind_the_trim_gets_the_task_then_what_follows(store: Any) -> None:
    task = store.create(new_task(text_message("user", "hi"))).task
    task_id = task["id"]
    assert transition(store, task_id, to_state(WORKING)).applied
    chunks(store, task_id, 2)  # events 3 and 4
    follower = follow(store, task_id, 1, deadline=time.monotonic() + 30, idle=5, reader="test")
    assert next(follower)[0] == 2  # type: ignore[index]
    # The follower stops reading while the agent writes far past the kept log.
    chunks(store, task_id, WRITTEN)
    assert trimmed(store, task_id) > 5
    before = gaps("test")
    # What it had already read comes first, then the task as it stands, not event 5.
    assert [next(follower)[0], next(follower)[0]] == [3, 4]  # type: ignore[index]
    caught_up = next(follower)
    assert isinstance(caught_up, Record)
    assert caught_up.seq == 4 + WRITTEN
    assert len(caught_up.task["artifacts"][0]["parts"]) == 2 + WRITTEN
    assert gaps("test") == before + 1
    # ...then what follows, in order, to the end.
    assert transition(store, task_id, to_state(COMPLETED)).applied
    rest = list(follower)
    assert [item[0] for item in rest if item is not None] == [caught_up.seq + 1]  # type: ignore[index]
    assert gaps("test") == before + 1


def test_reads_come_a_page_at_a_time(store: Any) -> None:
    task_id = store.create(new_task(text_message("user", "hi"))).task["id"]
    chunks(store, task_id, 30)
    page = store.events(task_id, 3, 10)
    assert [seq for seq, _ in page] == list(range(4, 14))
    assert [seq for seq, _ in store.events(task_id, 0)] == list(range(1, 32))


def test_a_follower_reads_a_long_log_in_pages(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    task_id = store.create(new_task(text_message("user", "hi"))).task["id"]
    assert transition(store, task_id, to_state(WORKING)).applied
    chunks(store, task_id, 29)
    assert transition(store, task_id, to_state(COMPLETED)).applied
    asked: list[int | None] = []
    events = store.events

    def counted(task_id: str, after: int, limit: int | None = None) -> Any:
        asked.append(limit)
        return events(task_id, after, limit)

    monkeypatch.setattr(follow_module, "PAGE", 7)
    monkeypatch.setattr(store, "events", counted)
    seen = [item[0] for item in follow(store, task_id, 0, deadline=time.monotonic() + 10)]  # type: ignore[index]
    assert seen == list(range(1, 33))
    assert asked == [7] * 5  # 32 events: four full pages and a last one


@pytest.fixture
def short_log() -> Iterator[tuple[str, MemoryStore]]:
    """The app served with countdown over a memory store that keeps only
    the newest SHORT_LOG events of a task (its own trim, as it appends)."""
    store = memory_store(log_limit=SHORT_LOG)
    config = Settings(run="examples.agents:countdown")
    dispatcher = InProcessDispatcher(store, load_agent(config), config, threads=4)
    try:
        with live_server(create_app(config, store=store, dispatcher=dispatcher)) as (url, _):
            yield url, store
    finally:
        dispatcher.close(timeout=5)


def test_a_stream_that_resumes_behind_the_trim_gets_the_task_then_the_rest(
    short_log: tuple[str, MemoryStore],
) -> None:
    url, store = short_log
    message = user("0.05 6")  # 11 events: submitted, 2 working, 7 chunks, completed
    ids = [event.id for event in Stream(url, "SendStreamingMessage", {"message": message})]
    task_id = next(iter(store.all()))
    # The store trimmed the log's head as the agent wrote past its limit.
    assert [seq for seq, _ in store.events(task_id, 0)] == list(range(12 - SHORT_LOG, 12))
    before = gaps("resume")
    resumed = list(Stream(url, "SubscribeToTask", {"id": task_id}, last_event_id=2))
    assert kinds(results(resumed)) == ["task TASK_STATE_COMPLETED"]
    assert resumed[0].id == ids[-1] == 11
    assert gaps("resume") == before + 1


def test_a_resume_beyond_the_last_event_gets_the_task(serve: Serve) -> None:
    """An id the store no longer knows (numbers it lost in a crash) is not a
    place in the log: the stream starts from the task as it stands."""
    url, _ = serve("examples.agents:countdown")
    message = user("3")
    first = list(Stream(url, "SendStreamingMessage", {"message": message}))
    last = first[-1].id or 0
    before = gaps("resume")
    again = list(Stream(url, "SendStreamingMessage", {"message": message}, last_event_id=last + 5))
    assert kinds(results(again)) == ["task TASK_STATE_COMPLETED"]
    assert again[0].id == last
    assert gaps("resume") == before + 1
