"""Fair turns keep releasing through faults, on every store's turn book.

A task that ends, whoever writes its end, leaves the book's flight in that
very write (nobody has to follow it with a release: a reaper's fail, a
worker killed after saving); beat's sweep puts the book right against the
tasks and the workers, counting each repair; and a worker whose store was
out of reach registers its slots again as soon as the store is back. Real
stores throughout: memory, a directory, a private redis-server (also
behind a `FaultProxy`) and the machine's PostgreSQL.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from shared import Settings
from shared.events import status_update, to_state
from shared.owners.book import Entry
from shared.owners.turns import SlotKeeper, Turns, turns_for
from shared.store.wiring import abilities_of
from shared.stores.redis.store import redis_store
from shared.task import (
    CANCELED,
    COMPLETED,
    INPUT_REQUIRED,
    SUBMITTED,
    WORKING,
    new_task,
    text_message,
)
from shared.transitions import transition
from tests.support.fault_proxy import proxied, proxy_for
from tests.support.polling import wait_for
from tests.support.store_kinds import Stores
from worker.engine.reaper import reap_stale


@pytest.fixture
def store(store_kind: str, stores: Stores) -> Any:
    return stores.open(store_kind)


def wired(store: Any, published: list[str]) -> Turns:
    """The store's turns as a process wires them (`turns_for`, with the
    store's abilities)."""
    can = abilities_of(store)
    turns = turns_for(
        Settings(), can.turn_book, published.append, release_on_commit=can.release_on_commit
    )
    assert turns is not None
    return turns


def running(store: Any, turns: Turns) -> str:
    """A task saved, held, taken into flight and claimed by a worker."""
    task = store.create(new_task(text_message("user", "hi"))).task
    turns.enqueue(task)
    assert turns.book.held_among([task["id"]])[1] == {task["id"]}
    claimed = store.claim(task["id"], SUBMITTED, status_update(task, WORKING))
    assert claimed is not None and claimed.applied
    return str(task["id"])


ENDS: dict[str, Callable[[Any, str], None]] = {
    "completed by its worker": lambda store, task_id: _to(store, task_id, COMPLETED),
    "failed by the reaper": lambda store, task_id: _reaped(store, task_id),
    "canceled": lambda store, task_id: _to(store, task_id, CANCELED),
    "waiting for input": lambda store, task_id: _to(store, task_id, INPUT_REQUIRED),
}


def _to(store: Any, task_id: str, state: str) -> None:
    assert transition(store, task_id, to_state(state)).applied


def _reaped(store: Any, task_id: str) -> None:
    assert reap_stale(store, time.time() + 3600, stale_after=1.0) == [task_id]


@pytest.mark.parametrize("end", sorted(ENDS))
def test_a_task_that_ends_leaves_flight_in_the_write_that_ends_it(store: Any, end: str) -> None:
    published: list[str] = []
    turns = wired(store, published)
    task_id = running(store, turns)
    ENDS[end](store, task_id)
    # No release followed the write: the write itself took the task out.
    assert turns.book.held_among([task_id]) == (set(), set())
    assert turns.book.in_flight() == []


def repairs(kind: str) -> float:
    return REGISTRY.get_sample_value("toolnexus_turn_repairs_total", {"repair": kind}) or 0.0


def test_beats_sweep_repairs_the_book_and_counts_each_repair(store: Any) -> None:
    published: list[str] = []
    turns = wired(store, published)
    book = turns.book
    # In flight with no task behind it (its task gone), and a worker whose
    # registration lapsed; a held task waits behind them.
    assert book.hold_and_take([Entry("ghost", "o")], True) == ["ghost"]
    assert book.hold_and_take([Entry("waiting", "o")], True) == []  # the floor's one: taken
    book.register("gone-worker", 1, 0.05)
    wait_for(lambda: book.view().capacity == 0, timeout=30, what="the registration to lapse")
    book.hold_and_take([Entry("later", "o")], True)  # sends step the book between sweeps
    flight, slots = repairs("flight"), repairs("slots")

    assert turns.repair(store.get) == ["ghost"]

    assert repairs("flight") == flight + 1
    assert repairs("slots") == slots + 1
    assert book.lapsed() == []  # dropped once, counted once
    assert book.in_flight() == ["waiting"]  # the room went to the held task
    assert published[-1] == "waiting"


def test_a_worker_registers_its_slots_as_soon_as_the_store_is_back(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Its heartbeat an hour long: were it to wait for the next one after a
    failed registration, its slots would stay out of the book for an hour."""
    direct = redis_store(redis_url)
    with proxy_for(redis_url, 6379) as proxy:
        through = redis_store(proxied(redis_url, proxy.port), timeout=0.5)
        published: list[str] = []
        turns = wired(through, published)
        book = direct.turn_book()
        assert book.hold_and_take([Entry("first", "o")], True) == ["first"]  # the floor: full
        book.hold_and_take([Entry("second", "o")], True)
        proxy.refuse()  # the store out of reach as the worker starts
        keeper = SlotKeeper(turns, "worker-1", 2, every=3600, ttl=3600).start()
        try:
            wait_for(
                lambda: "could not register worker-1's slots" in caplog.text,
                timeout=30,
                what="a try to fail",
            )
            assert book.view().capacity == 0
            proxy.start()
            wait_for(lambda: book.view().capacity == 2, timeout=30, what="the slots again")
            # Registered, it publishes what has room now.
            wait_for(lambda: "second" in published, timeout=30, what="the held task published")
        finally:
            keeper.stop()
