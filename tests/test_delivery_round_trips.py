"""A delivery's end on the Redis store with fair turns: the write that takes
the task out of flight also releases it from the turn book, in one script
(`lua/commit_released.lua`), and what that step takes is published at once;
the `delivered` that follows asks the book nothing more. A write that keeps
the task in flight releases nothing, and a book not asked to release with
writes runs its own step as before. The processes where deliveries end (a
Celery worker's, the in-process workers) ask for it; a front end does not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from shared import Settings
from shared.events import to_state
from shared.owners.book import OwnerCount
from shared.owners.limits import LimitTable
from shared.owners.turns import Turns
from shared.stores.redis.store import RedisStore
from shared.task import COMPLETED, INPUT_REQUIRED, SUBMITTED, WORKING, new_task, text_message
from shared.transitions import claim, transition
from tests.test_send_round_trips import Broker, CountedBook


class Served:
    """A store, its turn book's steps counted, and a worker's turns on it."""

    def __init__(self, client: redis.Redis, *, with_writes: bool) -> None:
        self.store = RedisStore(client, prefix="dr:")
        self.book = self.store.turn_book()
        self.counted = CountedBook(self.book)
        self.broker = Broker()
        self.turns = Turns(self.book, LimitTable(Settings()), self.broker.enqueue)
        if with_writes:
            self.turns.release_with_writes(self.book.release_on_commit)
        # One live worker with one slot: a window of two.
        self.book.register("worker-1", 1, 60)

    def sent(self, count: int) -> list[str]:
        ids = []
        for number in range(count):
            task = new_task(text_message("user", f"task {number}"), owner="alice")
            assert self.store.create(task).created
            self.turns.enqueue(task)
            ids.append(task["id"])
        return ids

    def run_to(self, task_id: str, state: str) -> None:
        """A delivery: its claim, then its last write."""
        assert claim(self.store, task_id, to=WORKING, from_state=SUBMITTED).applied
        assert transition(self.store, task_id, to_state(state), from_states={WORKING}).applied


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(redis_url)
    try:
        yield connection
    finally:
        connection.close()


@pytest.mark.parametrize("state", [COMPLETED, INPUT_REQUIRED])
def test_the_last_write_releases_the_task_and_publishes_what_has_its_turn(
    client: redis.Redis, state: str
) -> None:
    served = Served(client, with_writes=True)
    first, second, third = served.sent(3)
    assert served.broker.published == [first, second]  # the window: two
    steps = served.counted.steps
    served.run_to(first, state)
    # The write's own script released it and took the third: published
    # before the delivery has said it ended, with no step of the book's own.
    assert served.broker.published == [first, second, third]
    served.turns.delivered(first, state)
    assert served.counted.steps == steps
    assert served.broker.published == [first, second, third]
    assert sorted(served.book.in_flight()) == sorted([second, third])
    assert served.book.view().owners["alice"] == OwnerCount(held=0, in_flight=2)
    assert served.book._released == set()  # each release asked for was handed on


def test_a_write_that_keeps_the_task_in_flight_releases_nothing(client: redis.Redis) -> None:
    served = Served(client, with_writes=True)
    first, second, third = served.sent(3)
    assert claim(served.store, first, to=WORKING, from_state=SUBMITTED).applied
    progress = transition(served.store, first, lambda task: [], from_states={WORKING})
    assert progress.record is not None
    assert served.broker.published == [first, second]
    assert served.book.held_among([third]) == ({third}, set())
    # A duplicate delivery's end (the task still working) makes no room either.
    served.turns.delivered(first, WORKING)
    assert served.broker.published == [first, second]


def test_a_write_refused_releases_nothing_and_the_delivery_s_end_still_makes_room(
    client: redis.Redis,
) -> None:
    served = Served(client, with_writes=True)
    first, second, third = served.sent(3)
    assert claim(served.store, first, to=WORKING, from_state=SUBMITTED).applied
    # Canceled by a process whose writes do not release (a front end): the
    # delivery's own last write is then refused, so its end makes the room.
    other = RedisStore(client, prefix="dr:")
    assert transition(other, first, to_state("canceled"), from_states={WORKING}).applied
    assert served.broker.published == [first, second]
    assert not transition(served.store, first, to_state(COMPLETED), from_states={WORKING}).applied
    assert served.broker.published == [first, second]
    steps = served.counted.steps
    served.turns.delivered(first, "canceled")
    assert served.counted.steps == steps + 1
    assert served.broker.published == [first, second, third]


def test_without_release_with_writes_the_book_takes_its_own_step(client: redis.Redis) -> None:
    served = Served(client, with_writes=False)
    first, second, third = served.sent(3)
    steps = served.counted.steps
    served.run_to(first, COMPLETED)
    assert served.broker.published == [first, second]
    served.turns.delivered(first, COMPLETED)
    assert served.counted.steps == steps + 1
    assert served.broker.published == [first, second, third]


def test_releases_never_asked_for_are_forgotten_and_the_book_asked(client: redis.Redis) -> None:
    served = Served(client, with_writes=True)
    (first,) = served.sent(1)
    for number in range(1100):  # written by a reaper, say: no delivery ends after them
        served.book.released(f"never-{number}", [])
    assert len(served.book._released) <= 1024
    served.run_to(first, COMPLETED)
    served.turns.delivered(first, COMPLETED)
    assert served.book.in_flight() == []


def test_every_process_asks_for_releases_with_its_writes(
    client: redis.Redis, redis_url: str
) -> None:
    """A task that ends leaves flight in the write that ends it, whoever
    writes it: a Celery worker's process (and beat's), the in-process
    workers, and a front end (a cancel)."""
    from web.core.tasks import Tasks
    from worker.engine.agent import load_agent
    from worker.engine.inprocess import InProcessDispatcher
    from worker.runtime.app import ProcessRuntime

    settings = Settings(broker_url=redis_url)
    celery_store = RedisStore(client, prefix="celery:")
    assert ProcessRuntime(settings, celery_store).turns() is not None
    assert celery_store.turn_book()._on_commit is not None

    embedded_store = RedisStore(client, prefix="embedded:")
    workers = InProcessDispatcher(embedded_store, load_agent(settings), settings, threads=1)
    try:
        assert embedded_store.turn_book()._on_commit is not None
    finally:
        workers.close()

    front_store = RedisStore(client, prefix="front:")
    assert Tasks(settings, front_store, Broker()).turns is not None
    assert front_store.turn_book()._on_commit is not None
