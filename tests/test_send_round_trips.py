"""A send on the Redis store with fair turns: the task saved and held in the
turn book in one script (`RedisStore.create_held`), one round trip where
the create and the book's step took two, with the same outcome: the task
held or taken, what has its turn published, a repeated message neither
saved nor held again, and a send with a webhook (saved between the create
and the hold) still held, by the book's own step."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from shared import Settings
from shared.owners.book import OwnerCount
from shared.stores.redis.store import RedisStore
from shared.stores.redis.turns import RedisTurnBook
from shared.task import SUBMITTED, state_of
from web.core.params import send_params
from web.core.tasks import Tasks


class Broker:
    """A dispatcher whose workers take turns: records what it publishes."""

    takes_turns = True

    def __init__(self) -> None:
        self.published: list[str] = []

    def enqueue(self, task_id: str) -> None:
        self.published.append(task_id)

    def revoke(self, task_id: str) -> None:
        pass

    def check(self) -> None:
        pass


class CountedBook:
    """Counts the turn book's own script runs (each a round trip)."""

    def __init__(self, book: RedisTurnBook) -> None:
        self.steps = 0
        step = book._step

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.steps += 1
            return step(*args, **kwargs)

        book._step = counted  # type: ignore[assignment]


@pytest.fixture
def served(redis_url: str) -> Iterator[tuple[Tasks, RedisStore, Broker, CountedBook]]:
    client = redis.Redis.from_url(redis_url)
    store = RedisStore(client, prefix="rt:")
    broker = Broker()
    tasks = Tasks(Settings(), store, broker)
    assert tasks.turns is not None and tasks.turns.book is store.turn_book()
    try:
        yield tasks, store, broker, CountedBook(store.turn_book())
    finally:
        client.close()


def _params(message_id: str, **extra: Any) -> Any:
    message = {"role": "user", "messageId": message_id, "parts": [{"kind": "text", "text": "hi"}]}
    return send_params({"message": message, **extra})


def test_a_send_is_saved_held_and_taken_in_one_step(
    served: tuple[Tasks, RedisStore, Broker, CountedBook],
) -> None:
    tasks, store, broker, counted = served
    first = tasks.send(_params("m-1"), "alice", blocking=False).task
    second = tasks.send(_params("m-2"), "alice", blocking=False).task
    assert counted.steps == 0  # each book step ran inside the create's script
    # No worker registered: a window of one. The first is taken and published,
    # the second held for its turn.
    assert broker.published == [first["id"]]
    book = store.turn_book()
    assert book.in_flight() == [first["id"]]
    assert book.held_among([second["id"]])[0] == {second["id"]}
    for task in (first, second):
        saved = store.get(task["id"])
        assert saved is not None and state_of(saved) == SUBMITTED and saved["owner"] == "alice"
    assert book._taken == {}  # every step's result was handed on


def test_a_repeated_message_is_neither_saved_nor_held_again(
    served: tuple[Tasks, RedisStore, Broker, CountedBook],
) -> None:
    tasks, store, broker, counted = served
    first = tasks.send(_params("m-1"), "alice", blocking=False)
    again = tasks.send(_params("m-1"), "alice", blocking=False)
    assert again.repeated and again.task["id"] == first.task["id"]
    assert broker.published == [first.task["id"]]
    assert store.turn_book().view().owners["alice"] == OwnerCount(held=0, in_flight=1)
    assert counted.steps == 0 and store.turn_book()._taken == {}


def test_a_send_with_a_webhook_is_held_by_the_books_own_step(
    redis_url: str,
) -> None:
    client = redis.Redis.from_url(redis_url)
    store = RedisStore(client, prefix="rt:")
    broker = Broker()
    tasks = Tasks(Settings(push=True), store, broker)
    counted = CountedBook(store.turn_book())
    try:
        webhook = {"url": "https://example.com/hook"}
        sent = tasks.send(
            _params("m-1", configuration={"pushNotificationConfig": webhook}),
            "alice",
            blocking=False,
        )
        assert counted.steps == 1  # the webhook saved between the create and the hold
        assert broker.published == [sent.task["id"]]
        assert tasks.push is not None and tasks.push.configs(sent.task["id"])
    finally:
        client.close()


def test_a_step_result_never_asked_for_is_forgotten_and_the_book_asked(
    served: tuple[Tasks, RedisStore, Broker, CountedBook],
) -> None:
    tasks, store, broker, counted = served
    book = store.turn_book()
    for n in range(1100):  # far more than any send leaves waiting
        book.took(f"never-{n}", [])
    assert len(book._taken) <= 1024
    sent = tasks.send(_params("m-1"), "alice", blocking=False)
    assert broker.published == [sent.task["id"]] and counted.steps == 0
