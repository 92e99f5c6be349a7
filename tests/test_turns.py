"""Turns in one process: the running cap, message priorities, and beat's
sweep keeping the turn book honest.

The front end and in-process workers here are the embedded composition
over real HTTP (the app, a memory store and its turn book, worker threads
running a gated agent), so each check watches what a caller sees. The
sweep's cases use the memory store's book with a publish that records what
it is asked to put on the broker.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from shared import Settings
from shared.errors import BrokerError
from shared.events import message_added, status_update, to_state
from shared.owners.book import LocalBook
from shared.owners.limits import LimitTable
from shared.owners.turns import BROKER_FRESH, SlotKeeper, Turns
from shared.store.contract import Store
from shared.stores.memory.store import MemoryStore, memory_store
from shared.stores.redis.store import redis_store
from shared.task import (
    CANCELED,
    COMPLETED,
    INPUT_REQUIRED,
    SUBMITTED,
    WORKING,
    new_task,
    state_of,
    text_message,
)
from shared.transitions import transition
from tests.support.a2a import send_request
from tests.support.agents import gate
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer
from tests.support.store_kinds import Stores
from tests.test_web_support import live_server
from web import create_app
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher
from worker.engine.reaper import sweep

TOKENS = {"a": "tok-a-turns", "b": "tok-b-turns"}


def _send(
    url: str, owner: str, text: str, metadata: dict[str, Any] | None = None
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKENS[owner]}"}
    body = send_request(text, metadata)
    reply: dict[str, Any] = requests.post(f"{url}/", json=body, headers=headers, timeout=10).json()
    return reply


def _state(store: MemoryStore, task_id: str) -> str:
    task = store.get(task_id)
    assert task is not None
    return state_of(task)


def _gate_name(label: str) -> str:
    """A gate of this test's own: one a test opened stays open for the process."""
    name = f"turns-{label}-{uuid.uuid4().hex[:8]}"
    OPENED_AT_END.append(name)
    return name


OPENED_AT_END: list[str] = []


@pytest.fixture
def served() -> Iterator[tuple[str, MemoryStore]]:
    config = Settings(
        run="tests.support.agents:gated",
        api_tokens=tuple(f"{who}:{token}" for who, token in TOKENS.items()),
        owner_max_running=1,
    )
    store = memory_store()
    dispatcher = InProcessDispatcher(store, load_agent(config), config, threads=4)
    try:
        with live_server(create_app(config, store=store, dispatcher=dispatcher)) as (url, _):
            yield url, store
    finally:
        for name in OPENED_AT_END:
            gate(name)[1].set()  # nothing left waiting at a gate
        dispatcher.close(timeout=5)


def test_an_owner_at_its_running_cap_waits_while_another_owner_runs(
    served: tuple[str, MemoryStore],
) -> None:
    url, store = served
    name_a, name_b = _gate_name("a"), _gate_name("b")
    entered_a, open_a = gate(name_a)
    entered_b, open_b = gate(name_b)
    a_ids = [_send(url, "a", f"{name_a} 0")["result"]["id"] for _ in range(3)]
    assert entered_a.wait(10)
    # Four threads are free, but A may run one task at a time.
    states = [_state(store, task_id) for task_id in a_ids]
    assert sorted(states) == [SUBMITTED, SUBMITTED, WORKING], states
    b_id = _send(url, "b", f"{name_b} 0")["result"]["id"]
    assert entered_b.wait(10)  # B runs beside A's one
    assert _state(store, b_id) == WORKING
    assert sorted(_state(store, task_id) for task_id in a_ids) == [SUBMITTED, SUBMITTED, WORKING]
    open_a.set()
    open_b.set()
    for task_id in [*a_ids, b_id]:
        wait_for(
            lambda task_id=task_id: _state(store, task_id) == COMPLETED,
            timeout=20,
            what=f"{task_id} to complete",
        )


def test_an_owners_higher_priority_task_runs_first(served: tuple[str, MemoryStore]) -> None:
    url, store = served
    first_gate, after = _gate_name("first"), _gate_name("after")
    entered, first_open = gate(first_gate)
    first = _send(url, "a", f"{first_gate} 0")["result"]["id"]
    assert entered.wait(10)  # A's one running slot is taken: the next two are held
    gate(after)[1].set()
    low = _send(url, "a", f"{after} 0", {"priority": -5})["result"]["id"]
    high = _send(url, "a", f"{after} 0", {"priority": 5})["result"]["id"]
    first_open.set()
    finished = {}
    for task_id in (first, low, high):
        wait_for(
            lambda task_id=task_id: _state(store, task_id) == COMPLETED,
            timeout=20,
            what=f"{task_id} to complete",
        )
        task = store.get(task_id)
        assert task is not None
        finished[task_id] = task["status"]["timestamp"]
    # One at a time: the high one, sent last, finished before the low one.
    assert finished[high] < finished[low], finished


@pytest.mark.parametrize("value", ["high", 11, -11, 1.5, True])
def test_a_priority_that_is_not_a_whole_number_in_range_is_refused(
    served: tuple[str, MemoryStore], value: object
) -> None:
    url, store = served
    before = len(store.all())
    reply = _send(url, "a", "anything 0", {"priority": value})
    assert reply["error"]["code"] == -32602, reply
    assert "message.metadata.priority" in reply["error"]["message"], reply
    assert len(store.all()) == before  # nothing saved


# --- beat's sweep and the turn book ---------------------------------------------


class Published:
    """A publish that records each task id put on the broker."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def __call__(self, task_id: str) -> None:
        self.ids.append(task_id)


def _turns(store: Store, published: Published) -> Turns:
    book = store.turn_book()
    assert isinstance(book, LocalBook)
    return Turns(book, LimitTable(Settings()), published)


def _saved(store: Store, owner: str = "a") -> dict[str, Any]:
    task = new_task(text_message("user", "hello"), owner=owner)
    created = store.create(task, None)
    return dict(created.task)


def _sweep(store: Store, turns: Turns) -> None:
    never = Published()  # a sweep with turns sends through the book, not this
    sweep(store, never, time.time() + 1_000, 60.0, turns=turns)
    assert never.ids == []


def test_the_sweep_leaves_a_held_task_waiting_for_its_turn() -> None:
    store, published = memory_store(), Published()
    turns = _turns(store, published)
    first, second = _saved(store), _saved(store)
    turns.enqueue(first)  # no worker registered: one in flight, the rest held
    turns.enqueue(second)
    assert published.ids == [first["id"]]
    _sweep(store, turns)  # both still `submitted`, last sent long "ago"
    # The one in flight may have lost its message: sent again. The held one waits.
    assert published.ids == [first["id"], first["id"]]
    assert turns.book.held_among([second["id"]])[0] == {second["id"]}


def test_the_sweep_releases_a_finished_task_left_in_flight_and_gives_its_turn_on() -> None:
    store, published = memory_store(), Published()
    turns = _turns(store, published)
    first, second = _saved(store), _saved(store)
    turns.enqueue(first)
    turns.enqueue(second)
    # Finished without its delivery ending (a worker killed after the save,
    # a revoked message): only the sweep can tell the book.
    transition(store, first["id"], to_state(CANCELED))
    _sweep(store, turns)
    assert turns.book.in_flight() == [second["id"]]
    assert published.ids[-1] == second["id"]


def test_the_sweep_holds_a_submitted_task_the_book_lost() -> None:
    store, published = memory_store(), Published()
    turns = _turns(store, published)
    lost = _saved(store)  # saved, then its front end died before the book heard of it
    _sweep(store, turns)
    assert published.ids == [lost["id"]]
    assert turns.book.in_flight() == [lost["id"]]


# --- a held send and the broker ------------------------------------------------------


class Broker:
    """A broker check that counts its calls and answers as told."""

    def __init__(self) -> None:
        self.checks = 0
        self.down = False

    def check(self) -> None:
        self.checks += 1
        if self.down:
            raise BrokerError("broker unavailable: connection refused")


def _held_turns(broker: Broker) -> tuple[Turns, Store]:
    store = memory_store()
    book = store.turn_book()
    assert isinstance(book, LocalBook)
    turns = Turns(book, LimitTable(Settings()), Published(), check=broker.check)
    turns.enqueue(_saved(store))  # no worker's slots: the window of one is taken
    return turns, store


def test_a_held_send_asks_the_broker_once_for_all_held_meanwhile() -> None:
    broker = Broker()
    turns, store = _held_turns(broker)
    assert broker.checks == 0  # the first send was published: the broker took it
    for _ in range(5):
        assert turns.enqueue(_saved(store)) is False  # held
    assert broker.checks == 0  # heard from it within the last second


def test_a_held_send_is_refused_while_the_broker_does_not_answer() -> None:
    broker = Broker()
    turns, store = _held_turns(broker)
    turns._broker_heard -= BROKER_FRESH  # a second since the broker took anything
    broker.down = True
    with pytest.raises(BrokerError):
        turns.enqueue(_saved(store))
    asked = broker.checks
    with pytest.raises(BrokerError):  # the refusal stands a second: not asked again
        turns.enqueue(_saved(store))
    assert broker.checks == asked == 1


# --- a reply that comes before the delivery that asked for it has ended ---------


@pytest.fixture
def any_book_store(store_kind: str, stores: Stores) -> Store:
    return stores.open(store_kind)


def test_a_reply_before_the_asking_delivery_ends_is_published_at_once(
    any_book_store: Store,
) -> None:
    """The worker saved `input-required`; the caller's reply is applied before
    that delivery has made room. The task is still in the delivery's flight,
    so the book does not hold it again, and the delivery's end only releases
    it: the reply must be published by its own send, not left `submitted`
    for beat's resend a stale time later."""
    store, published = any_book_store, Published()
    book = store.turn_book()
    assert book is not None
    turns = Turns(book, LimitTable(Settings()), published)
    task = _saved(store)
    task_id = task["id"]
    assert turns.enqueue(task)
    assert transition(store, task_id, to_state(WORKING), from_states={SUBMITTED}).applied
    assert transition(store, task_id, to_state(INPUT_REQUIRED), from_states={WORKING}).applied
    reply = text_message("user", "this one")
    replied = transition(
        store,
        task_id,
        lambda current: [message_added(current, reply), status_update(current, SUBMITTED)],
        from_states={INPUT_REQUIRED},
    )
    assert replied.applied and replied.record is not None
    assert turns.enqueue(replied.record.task)  # before the asking delivery ended
    assert published.ids == [task_id, task_id]
    turns.delivered(task_id, INPUT_REQUIRED)  # that delivery's end, late
    assert published.ids == [task_id, task_id]
    # The reply's delivery claims it once.
    assert transition(store, task_id, to_state(WORKING), from_states={SUBMITTED}).applied
    assert not transition(store, task_id, to_state(WORKING), from_states={SUBMITTED}).applied


def test_a_new_task_that_waits_for_its_turn_asks_the_book_nothing_more(
    any_book_store: Store,
) -> None:
    store, published = any_book_store, Published()
    book = store.turn_book()
    assert book is not None
    turns = Turns(book, LimitTable(Settings()), published)
    first, second = _saved(store), _saved(store)
    assert turns.enqueue(first)  # no worker registered: a window of one
    asked: list[list[str]] = []
    held_among = book.held_among

    def counted(task_ids: list[str]) -> tuple[set[str], set[str]]:
        asked.append(task_ids)
        return held_among(task_ids)

    book.held_among = counted  # type: ignore[method-assign]
    assert not turns.enqueue(second)
    assert asked == [] and published.ids == [first["id"]]


class TakingBook:
    """A turn book whose every step takes `taken`, in that order."""

    def __init__(self, taken: list[str]) -> None:
        self.taken = taken

    def hold_and_take(self, entries: list[Any], fair: bool) -> list[str]:
        return list(self.taken)


def test_a_send_whose_own_task_went_out_before_a_refusal_stands() -> None:
    published = Published()

    def publish(task_id: str) -> None:
        if task_id == "other":
            raise BrokerError("broker unavailable: no connection free")
        published(task_id)

    own = {"id": "own", "history": []}
    first = Turns(TakingBook(["own", "other"]), LimitTable(Settings()), publish)  # type: ignore[arg-type]
    assert first.enqueue(own) is True  # published; the other left for beat's resend
    assert published.ids == ["own"]
    refused = Turns(TakingBook(["other", "own"]), LimitTable(Settings()), publish)  # type: ignore[arg-type]
    with pytest.raises(BrokerError):
        refused.enqueue(own)  # never published: the send is refused
    assert published.ids == ["own"]


def test_a_store_outage_is_warned_of_once_and_its_end_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A worker's slots keeper retries every round while its store is down,
    warning once an outage (not at every round) and saying when it registers
    again; on a real redis-server, stopped and started."""
    server = RedisServer(appendonly=True).start()
    store = redis_store(f"{server.url}/1", timeout=0.2)
    book = store.turn_book()
    turns = Turns(book, LimitTable(Settings.from_env()), lambda task_id: None)
    keeper = SlotKeeper(turns, "worker-a", 2, every=0.02, ttl=5.0)
    caplog.set_level(logging.DEBUG, logger="shared.owners.turns")

    def said(level: int, words: str) -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.levelno == level and words in r.getMessage()]

    try:
        keeper.start()
        wait_for(lambda: book.view().capacity == 2, what="the slots registered")
        server.stop()
        wait_for(
            lambda: len(said(logging.DEBUG, "could not register")) >= 3,
            what="several rounds failed",
        )
        assert len(said(logging.WARNING, "could not register")) == 1
        server.start()
        wait_for(lambda: said(logging.INFO, "registered again"), what="the end of the outage said")
        assert len(said(logging.WARNING, "could not register")) == 1
    finally:
        keeper.stop()
        server.close()
