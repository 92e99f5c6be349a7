"""A send on the Redis store with fair turns: the task saved and held in the
turn book in one script (`RedisStore.create_held`; on the SQLite and file
stores, in one transaction), one round trip where
the create and the book's step took two, with the same outcome: the task
held or taken, what has its turn published, a repeated message neither
saved nor held again, and a send with a webhook (saved between the create
and the hold) still held, by the book's own step. Where the broker is a
database of the same server, the send's message goes with it: queued at
once when the task is taken, else kept with the book and queued by the
step that takes it (`shared.broker.outbox`)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis

from shared import Settings
from shared.broker.dispatch import CeleryDispatcher
from shared.broker.dispatcher import FULFIL_TASK
from shared.broker.outbox import KEEP_FOR
from shared.broker.redis_queue import EVENT_EXCHANGE, SENT_ROUTING_KEY
from shared.events import to_state
from shared.owners.book import OwnerCount
from shared.owners.limits import LimitTable
from shared.owners.turns import Turns
from shared.stores.redis.store import RedisStore
from shared.stores.redis.turns import RedisTurnBook
from shared.task import COMPLETED, SUBMITTED, WORKING, state_of
from shared.transitions import claim, transition
from tests.support.redis_server import on_database
from tests.support.store_kinds import Stores
from web.core.params import send_params
from web.core.tasks import OUTBOX_PAUSE, Tasks

QUEUE = "toolnexus-outbox-test"


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
    assert book.creates._taken == {}  # every step's result was handed on


def test_a_repeated_message_is_neither_saved_nor_held_again(
    served: tuple[Tasks, RedisStore, Broker, CountedBook],
) -> None:
    tasks, store, broker, counted = served
    first = tasks.send(_params("m-1"), "alice", blocking=False)
    again = tasks.send(_params("m-1"), "alice", blocking=False)
    assert again.repeated and again.task["id"] == first.task["id"]
    assert broker.published == [first.task["id"]]
    assert store.turn_book().view().owners["alice"] == OwnerCount(held=0, in_flight=1)
    assert counted.steps == 0 and store.turn_book().creates._taken == {}


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
        book.creates.keep(f"never-{n}", [])
    assert len(book.creates._taken) <= 1024
    sent = tasks.send(_params("m-1"), "alice", blocking=False)
    assert broker.published == [sent.task["id"]] and counted.steps == 0


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_a_send_on_a_store_over_sqlite_is_saved_held_and_taken_in_one_transaction(
    kind: str, stores: Stores
) -> None:
    """The SQLite and file stores hold a send's task in the turn book inside
    the transaction that creates it: one write a send, with the same outcome."""
    store = stores.open(kind)
    broker = Broker()
    tasks = Tasks(Settings(), store, broker)
    statements: list[str] = []
    connection, _ = store.database._connection()
    connection.set_trace_callback(statements.append)
    try:
        first = tasks.send(_params("m-1"), "alice", blocking=False).task
        second = tasks.send(_params("m-2"), "alice", blocking=False).task
        again = tasks.send(_params("m-1"), "alice", blocking=False)
    finally:
        connection.set_trace_callback(None)
    assert statements.count("BEGIN IMMEDIATE") == 3, statements  # one write a send
    assert again.repeated and again.task["id"] == first["id"]
    assert broker.published == [first["id"]]
    book = store.turn_book()
    assert book.in_flight() == [first["id"]]
    assert book.held_among([second["id"]])[0] == {second["id"]}
    assert book.view().owners["alice"] == OwnerCount(held=1, in_flight=1)
    assert book.creates._taken == {}  # every step's result was handed on


# --- the message from the store's outbox --------------------------------------


@pytest.fixture
def outbox(
    redis_url: str,
) -> Iterator[tuple[Tasks, RedisStore, CeleryDispatcher, redis.Redis]]:
    """The front end's own dispatcher, its broker database 5 of the store's server."""
    client = redis.Redis.from_url(redis_url)
    store = RedisStore(client, prefix="rt:")
    broker_url = on_database(redis_url, 5)
    dispatcher = CeleryDispatcher(Settings(broker_url=broker_url, queue=QUEUE))
    broker = redis.Redis.from_url(broker_url)
    broker.delete(QUEUE)
    tasks = Tasks(Settings(), store, dispatcher)
    try:
        yield tasks, store, dispatcher, broker
    finally:
        broker.delete(QUEUE)
        broker.close()
        dispatcher.close()
        client.close()


def _queued(broker: redis.Redis) -> list[dict[str, Any]]:
    """The messages on the queue, oldest first, bodies decoded."""
    messages = []
    for raw in reversed(cast(list[bytes], broker.lrange(QUEUE, 0, -1))):
        message = json.loads(raw)
        message["body"] = json.loads(base64.b64decode(message["body"]))
        messages.append(message)
    return messages


class Announcements:
    """Celery's task-sent events on the broker's database, as they come."""

    def __init__(self, broker: redis.Redis) -> None:
        self._subscriber = broker.pubsub()
        self._subscriber.subscribe(f"/5.{EVENT_EXCHANGE}/{SENT_ROUTING_KEY}")
        assert self._subscriber.get_message(timeout=2) is not None  # the subscription itself

    def until(self, task_id: str) -> list[dict[str, Any]]:
        """The events heard up to the one announcing `task_id`, bodies decoded
        (the database may be shared: other tests' pass by too)."""
        heard: list[dict[str, Any]] = []
        deadline = time.monotonic() + 10
        while not heard or heard[-1]["body"]["uuid"] != task_id:
            assert time.monotonic() < deadline, f"no task-sent event for {task_id}"
            message = self._subscriber.get_message(timeout=1)
            if message is not None:
                event = json.loads(message["data"])
                event["body"] = json.loads(base64.b64decode(event["body"]))
                heard.append(event)
        return heard

    def close(self) -> None:
        self._subscriber.close()


class Sends:
    """Counts the commands redis-py sends (each a round trip here) and the
    dispatcher's own sends."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, dispatcher: CeleryDispatcher) -> None:
        self.packed = 0
        self.direct = 0
        send_packed = redis.connection.AbstractConnection.send_packed_command
        queue = dispatcher._redis_queue
        assert queue is not None
        send = queue.send

        def packed(connection: Any, *args: Any, **kwargs: Any) -> None:
            self.packed += 1
            send_packed(connection, *args, **kwargs)

        def direct(*args: Any) -> None:
            self.direct += 1
            send(*args)

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", packed)
        monkeypatch.setattr(queue, "send", direct)


class Made:
    """Records the tasks whose message the dispatcher made for the store's outbox."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tasks: Tasks) -> None:
        self.ids: list[str] = []
        making = tasks._outbox
        assert making is not None

        def made(task_id: str) -> Any:
            self.ids.append(task_id)
            return making(task_id)

        monkeypatch.setattr(tasks, "_outbox", made)


def test_a_taken_send_and_its_message_are_one_round_trip(
    outbox: tuple[Tasks, RedisStore, CeleryDispatcher, redis.Redis],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks, store, dispatcher, broker = outbox
    assert tasks._outbox is not None  # the same server: decided at wiring
    store.turn_book().register("a-worker", 10, 60.0)
    tasks.send(_params("m-0"), "alice", blocking=False)  # connections made
    sends = Sends(monkeypatch, dispatcher)
    sent = tasks.send(_params("m-1"), "alice", blocking=False).task
    assert sends.packed == 1 and sends.direct == 0
    first, second = _queued(broker)
    assert second["headers"]["id"] == sent["id"] and second["body"][0] == [sent["id"]]
    assert second["headers"]["task"] == FULFIL_TASK
    assert first["properties"]["delivery_tag"] != second["properties"]["delivery_tag"]
    assert store.turn_book().in_flight() and dispatcher._sent_from_outbox == set()
    saved = store.get(sent["id"])
    assert saved is not None and state_of(saved) == SUBMITTED


def _kept(store: RedisStore, task_id: str) -> bool:
    """Whether the book keeps a message for the task."""
    return bool(store.client.exists(f"rt:turns:msg:{task_id}"))


def test_a_held_send_is_queued_by_the_step_that_takes_it(
    outbox: tuple[Tasks, RedisStore, CeleryDispatcher, redis.Redis],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks, store, dispatcher, broker = outbox
    # No worker registered: a window of one. The first is taken (its message
    # from the outbox); the second is held, its message kept with the book, and queued
    # by the step that makes room: nobody publishes it.
    first = tasks.send(_params("m-1"), "alice", blocking=False).task
    sends = Sends(monkeypatch, dispatcher)
    made = Made(monkeypatch, tasks)
    second = tasks.send(_params("m-2"), "alice", blocking=False).task
    assert made.ids == [second["id"]] and _kept(store, second["id"])
    assert 0 < cast(int, store.client.ttl(f"rt:turns:msg:{second['id']}")) <= KEEP_FOR
    assert [message["headers"]["id"] for message in _queued(broker)] == [first["id"]]
    assert sends.direct == 0 and dispatcher._sent_from_outbox == set()
    assert tasks.turns is not None
    tasks.turns.ended(first["id"])
    queued = _queued(broker)
    assert [message["headers"]["id"] for message in queued] == [first["id"], second["id"]]
    assert queued[1]["body"][0] == [second["id"]] and queued[1]["headers"]["task"] == FULFIL_TASK
    assert sends.direct == 0 and not _kept(store, second["id"])
    assert store.turn_book().in_flight() == [second["id"]]


def test_a_held_task_released_before_its_turn_leaves_no_message(
    outbox: tuple[Tasks, RedisStore, CeleryDispatcher, redis.Redis],
) -> None:
    tasks, store, _, broker = outbox
    first = tasks.send(_params("m-1"), "alice", blocking=False).task
    second = tasks.send(_params("m-2"), "alice", blocking=False).task
    assert _kept(store, second["id"]) and tasks.turns is not None
    tasks.turns.released([second["id"]])  # canceled while held, say
    assert not _kept(store, second["id"])
    assert store.turn_book().held_among([second["id"]]) == (set(), set())
    tasks.turns.ended(first["id"])
    assert [message["headers"]["id"] for message in _queued(broker)] == [first["id"]]


@pytest.fixture
def keeping_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The book keeps a message only while it holds no other task."""
    monkeypatch.setattr("shared.broker.outbox.KEEP_MOST", 1)


@pytest.mark.usefixtures("keeping_one")
def test_past_the_keeping_bound_a_held_task_is_published_by_whoever_takes_it(
    outbox: tuple[Tasks, RedisStore, CeleryDispatcher, redis.Redis],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks, store, dispatcher, broker = outbox
    first = tasks.send(_params("m-1"), "alice", blocking=False).task
    second = tasks.send(_params("m-2"), "alice", blocking=False).task  # the book held none
    third = tasks.send(_params("m-3"), "alice", blocking=False).task  # the book held one
    assert _kept(store, second["id"]) and not _kept(store, third["id"])
    sends = Sends(monkeypatch, dispatcher)
    assert tasks.turns is not None
    tasks.turns.ended(first["id"])
    assert sends.direct == 0
    tasks.turns.ended(second["id"])
    assert sends.direct == 1
    queued = [message["headers"]["id"] for message in _queued(broker)]
    assert queued == [first["id"], second["id"], third["id"]]


@pytest.mark.usefixtures("keeping_one")
def test_past_the_keeping_bound_the_front_end_pauses_making_messages(
    outbox: tuple[Tasks, RedisStore, CeleryDispatcher, redis.Redis],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks, store, _, _ = outbox
    made = Made(monkeypatch, tasks)
    sent = [tasks.send(_params(f"m-{n}"), "alice", blocking=False).task for n in range(5)]
    # The first taken, the second kept, the third neither: none made for a while.
    assert made.ids == [sent[0]["id"], sent[1]["id"], sent[2]["id"]]
    tasks._outbox_resumes -= OUTBOX_PAUSE  # the pause over
    assert tasks.turns is not None
    tasks.turns.released([task["id"] for task in sent[1:]])  # room to keep again
    after = tasks.send(_params("m-5"), "alice", blocking=False).task
    assert made.ids[-1] == after["id"] and _kept(store, after["id"])


def test_a_workers_last_write_queues_the_kept_message_of_what_it_took(
    outbox: tuple[Tasks, RedisStore, CeleryDispatcher, redis.Redis],
) -> None:
    tasks, store, _, broker = outbox
    announcements = Announcements(broker)
    first = tasks.send(_params("m-1"), "alice", blocking=False).task
    second = tasks.send(_params("m-2"), "alice", blocking=False).task
    # A worker's process: its own store, whose releasing writes publish to it.
    worker_store = RedisStore(store.client, prefix="rt:")
    published = Broker()
    worker = Turns(worker_store.turn_book(), LimitTable(Settings()), published.enqueue)
    worker.release_with_writes(worker_store.turn_book().release_on_commit)
    assert claim(worker_store, first["id"], to=WORKING, from_state=SUBMITTED).applied
    assert transition(worker_store, first["id"], to_state(COMPLETED), from_states={WORKING}).applied
    assert published.published == [] and not _kept(store, second["id"])
    assert [message["headers"]["id"] for message in _queued(broker)] == [first["id"], second["id"]]
    ours = {first["id"], second["id"]}
    heard = [event["body"]["uuid"] for event in announcements.until(second["id"])]
    announcements.close()
    assert [uuid for uuid in heard if uuid in ours] == [first["id"], second["id"]]


def test_the_outbox_message_announces_itself_as_the_direct_sender_does(
    outbox: tuple[Tasks, RedisStore, CeleryDispatcher, redis.Redis],
) -> None:
    tasks, _, _, broker = outbox
    announcements = Announcements(broker)
    sent = tasks.send(_params("m-1"), "alice", blocking=False).task
    event = announcements.until(sent["id"])[-1]
    announcements.close()
    body = event["body"]
    assert body["type"] == "task-sent" and body["name"] == FULFIL_TASK
    assert event["properties"]["delivery_info"]["routing_key"] == SENT_ROUTING_KEY


def test_a_broker_on_another_server_is_sent_to_directly(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(redis_url)
    store = RedisStore(client, prefix="rt:")
    # The same server by another name: taken for another, as no pool can tell.
    other = redis_url.replace("127.0.0.1", "localhost")
    assert other != redis_url
    dispatcher = CeleryDispatcher(Settings(broker_url=on_database(other, 5), queue=QUEUE))
    tasks = Tasks(Settings(), store, dispatcher)
    try:
        assert tasks._outbox is None
        sends = Sends(monkeypatch, dispatcher)
        tasks.send(_params("m-1"), "alice", blocking=False)
        assert sends.direct == 1
    finally:
        redis.Redis.from_url(on_database(redis_url, 5)).delete(QUEUE)
        dispatcher.close()
        client.close()
