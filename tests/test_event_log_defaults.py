"""The event log at its defaults: a task's log keeps its newest 10,000 events
(`LOG_LIMIT`), and a follower takes at most 100 events per call to the store
(`PAGE`; `XRANGE … COUNT 100` on Redis), so a 10,000-event log never comes
back in one reply. On a memory store and on a real Redis store, each made with
default settings.

Redis trims with `XADD … MAXLEN ~ 10000`: whole nodes of its stream at a time,
so its log holds the newest 10,000 and up to a node more (measured: 10,007 to
10,016 of these events); the memory store keeps exactly 10,000."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from shared.events import Event, artifact_update, to_state
from shared.store.contract import Record, Store
from shared.store.follow import follow
from shared.stores.memory.store import memory_store
from shared.stores.redis.store import RedisStore, redis_store
from shared.task import COMPLETED, WORKING, new_task, text_message
from shared.transitions import transition

TOTAL = 10_050  # the task's events: created, working, the chunks, completed
KEPT = 10_000  # the log the docs promise: the newest 10,000
BATCH = 1_000  # chunks per commit: a few commits write the lot
ASKED = 100  # the page the docs promise


@pytest.fixture
def redis(redis_url: str) -> Iterator[RedisStore]:
    store = redis_store(redis_url)  # the defaults: no log limit given
    try:
        yield store
    finally:
        store.close()


def long_task(store: Store) -> str:
    """A finished task of TOTAL events, most of them artifact chunks written
    BATCH to a commit."""
    task_id = store.create(new_task(text_message("user", "hi"))).task["id"]
    assert transition(store, task_id, to_state(WORKING)).applied
    artifact = {"artifactId": "a-1", "parts": [{"kind": "text", "text": "x"}]}
    left = TOTAL - 3
    while left:
        count = min(BATCH, left)

        def chunks(task: Any, count: int = count) -> list[Any]:
            return [artifact_update(task, artifact, append=True, last_chunk=False)] * count  # type: ignore[arg-type]

        assert transition(store, task_id, chunks).applied
        left -= count
    assert transition(store, task_id, to_state(COMPLETED)).applied
    return task_id


class Counted:
    """A store's `events`, recording what each call asked for and how many
    events it returned."""

    def __init__(self, store: Store) -> None:
        self.read = store.events
        self.asked: list[int | None] = []
        self.returned: list[int] = []

    def events(self, task_id: str, after: int, limit: int | None = None) -> list[tuple[int, Event]]:
        page = self.read(task_id, after, limit)
        self.asked.append(limit)
        self.returned.append(len(page))
        return page


def followed_in_pages(store: Store, task_id: str, first: int) -> None:
    """What a follower reads of the task's log, with every store call counted:
    from the start, one page and then the task as it stands in place of the
    trimmed events; from just before `first` (where the log starts), every
    kept event in order, at most ASKED a call."""
    counted = Counted(store)
    events = store.events
    store.events = counted.events  # type: ignore[method-assign]
    try:
        from_start = list(follow(store, task_id, 0, deadline=time.monotonic() + 30, reader="test"))
        assert counted.returned == [ASKED]
        # The task is finished: the task as it stands is all there is to follow.
        (caught_up,) = from_start
        assert isinstance(caught_up, Record)
        assert caught_up.seq == TOTAL
        assert len(caught_up.task["artifacts"][0]["parts"]) == TOTAL - 3
        counted.asked.clear()
        counted.returned.clear()
        kept = list(follow(store, task_id, first - 1, deadline=time.monotonic() + 30))
    finally:
        store.events = events  # type: ignore[method-assign]
    # No task in place of an event and no idle tick: the kept log, whole.
    assert all(type(item) is tuple for item in kept)
    assert [item[0] for item in kept] == list(range(first, TOTAL + 1))  # type: ignore[index]
    # Full pages of ASKED, the last one the rest (none: the final event ends it).
    full, rest = divmod(TOTAL + 1 - first, ASKED)
    assert counted.returned == [ASKED] * full + ([rest] if rest else [])
    assert set(counted.asked) == {ASKED}


def test_a_memory_store_keeps_exactly_the_newest_ten_thousand_read_a_hundred_a_call() -> None:
    store = memory_store()  # the defaults: no log limit given
    task_id = long_task(store)
    first = TOTAL - KEPT + 1
    assert [seq for seq, _ in store.events(task_id, 0)] == list(range(first, TOTAL + 1))
    followed_in_pages(store, task_id, first)


def test_redis_keeps_the_newest_ten_thousand_read_a_hundred_a_call(redis: RedisStore) -> None:
    task_id = long_task(redis)
    logged = [seq for seq, _ in redis.events(task_id, 0)]
    # Every one of the newest KEPT, in order; the oldest trimmed, to within
    # a node of the stream (see above).
    first = logged[0]
    assert logged == list(range(first, TOTAL + 1))
    assert 1 < first <= TOTAL - KEPT + 1
    followed_in_pages(redis, task_id, first)
