"""Every store's turn book keeps one contract (`shared.owners.book.TurnBook`):
the book of each store kind (tests/support/store_kinds.py) takes the same
tasks in the same order, and holds against several book objects (threads
of one process) stepping one book at once: no task taken twice, none lost."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shared.events import to_state
from shared.keys import digest
from shared.owners.book import FLOOR, Entry, OwnerCount, TurnBook, TurnState
from shared.stores.file.store import file_store
from shared.task import COMPLETED, WORKING, new_task, text_message
from shared.transitions import transition
from tests.support.store_kinds import KINDS, Stores

MakeBook = Callable[[], TurnBook]


@pytest.fixture
def make_book(store_kind: str, stores: Stores) -> MakeBook:
    """A maker of book objects that all step one book, fresh for the test:
    each from another store object on the same data, as another process
    has it (the memory store's book is its process's own: the one book)."""

    def another() -> TurnBook:
        book: TurnBook | None = stores.open(store_kind).turn_book()
        assert book is not None
        return book

    if KINDS[store_kind].shared:
        return another
    only = another()
    return lambda: only


@pytest.fixture
def book(make_book: MakeBook) -> TurnBook:
    return make_book()


def held(owner: str, *task_ids: str, **terms: Any) -> list[Entry]:
    return [Entry(task_id, owner, **terms) for task_id in task_ids]


def hold_each(book: TurnBook, entries: list[Entry], fair: bool = True) -> list[str]:
    """Each entry held in a step of its own (as sends come), what they took."""
    return [task for entry in entries for task in book.hold_and_take([entry], fair)]


def run_one_at_a_time(book: TurnBook, first: list[str], fair: bool = True) -> list[str]:
    """Finish the tasks in flight one at a time (oldest first), as a worker
    with one slot does; every task taken meanwhile, in order."""
    flying, order = list(first), []
    while flying:
        taken = book.release_and_take([flying.pop(0)], fair)
        order += taken
        flying += taken
    return order


def one_slot(book: TurnBook) -> None:
    """One live worker with one slot: a window of two."""
    book.register("worker-1", 1, 60)


# --- turns ------------------------------------------------------------------


def test_a_second_owner_goes_round_robin_with_the_first(book: TurnBook) -> None:
    one_slot(book)
    first = hold_each(book, held("A", *(f"a{n}" for n in range(1, 7))))
    assert first == ["a1", "a2"]  # the window's two; the rest wait
    assert hold_each(book, held("B", "b1", "b2")) == []
    order = run_one_at_a_time(book, first)
    assert "b1" in order[:2]  # B's first task within the next two takes
    # (A's line empties at each take until it is full: it holds from the pass
    # of the last task taken, as B does; equal passes go to the earlier task.)
    assert order == ["a3", "b1", "a4", "b2", "a5", "a6"]


def test_ties_go_to_the_owner_whose_next_task_came_first(book: TurnBook) -> None:
    """Equal passes: not by the owners' names (`amy` sorts before `zed`)."""
    one_slot(book)
    first = hold_each(book, held("zed", *(f"z{n}" for n in range(1, 7))))
    assert hold_each(book, held("amy", "a1", "a2")) == []
    assert run_one_at_a_time(book, first) == ["z3", "a1", "z4", "a2", "z5", "z6"]


def test_without_fair_turns_tasks_go_in_arrival_order(book: TurnBook) -> None:
    one_slot(book)
    first = hold_each(book, held("A", "a1", "a2", "a3", "a4"), fair=False)
    assert first == ["a1", "a2"]
    assert hold_each(book, held("B", "b1", "b2"), fair=False) == []
    assert hold_each(book, held("A", "a5"), fair=False) == []
    assert run_one_at_a_time(book, first, fair=False) == ["a3", "a4", "b1", "b2", "a5"]


def test_an_owner_of_weight_two_gets_two_turns_to_one(book: TurnBook) -> None:
    one_slot(book)
    first = hold_each(book, held("A", *(f"a{n}" for n in range(1, 13)), weight=2.0))
    hold_each(book, held("B", *(f"b{n}" for n in range(1, 13))))
    order = run_one_at_a_time(book, first)
    assert order[:9] == ["a3", "b1", "a4", "a5", "b2", "a6", "a7", "b3", "a8"]
    assert Counter(task[0] for task in order[:9]) == {"a": 6, "b": 3}
    assert sorted(order) == sorted(
        [f"a{n}" for n in range(3, 13)] + [f"b{n}" for n in range(1, 13)]
    )


def test_an_owner_at_its_cap_is_skipped_until_one_is_released(book: TurnBook) -> None:
    book.register("worker-1", 3, 60)  # a window of four
    assert hold_each(book, held("A", "a1", "a2", "a3", max_running=1)) == ["a1"]
    assert hold_each(book, held("B", "b1", "b2")) == ["b1", "b2"]
    assert book.view().owners["A"] == OwnerCount(held=2, in_flight=1)
    assert book.release_and_take(["b1"], True) == []  # room, but A is at its cap
    assert book.release_and_take(["a1"], True) == ["a2"]
    assert book.release_and_take(["a2"], True) == ["a3"]


def test_within_an_owner_the_higher_priority_goes_first(book: TurnBook) -> None:
    one_slot(book)
    first = hold_each(book, held("A", "x1", "x2"))
    hold_each(
        book,
        [
            Entry("p0", "A", priority=0),
            Entry("p5", "A", priority=5),
            Entry("m3", "A", priority=-3),
            Entry("q5", "A", priority=5),
            Entry("top", "A", priority=10),
        ],
    )
    assert run_one_at_a_time(book, first) == ["top", "p5", "q5", "p0", "m3"]


# --- holding and releasing ---------------------------------------------------


def test_a_task_held_or_in_flight_is_not_held_again(book: TurnBook) -> None:
    one_slot(book)
    assert hold_each(book, held("A", "x1", "x2", "y")) == ["x1", "x2"]
    assert book.hold_and_take(held("A", "y", "x1"), True) == []
    assert book.view().owners == {"A": OwnerCount(held=1, in_flight=2)}
    assert book.held_among(["x1", "y", "z"]) == ({"y"}, {"x1"})
    assert sorted(book.in_flight()) == ["x1", "x2"]
    assert book.release_and_take(["x1"], True) == ["y"]
    assert book.release_and_take(["x2"], True) == []  # y was in its line once
    assert book.in_flight() == ["y"]


def test_a_held_task_released_leaves_its_line(book: TurnBook) -> None:
    one_slot(book)
    first = hold_each(book, held("A", "x1", "x2", "y1", "y2"))
    hold_each(book, held("B", "b1"))
    assert book.release_and_take(["y1", "b1"], True) == []  # canceled while held
    assert book.held_among(["y1", "y2", "b1"]) == ({"y2"}, set())
    assert book.view().owners == {"A": OwnerCount(held=1, in_flight=2)}
    assert run_one_at_a_time(book, first) == ["y2"]
    assert book.view().owners == {}


def test_held_among_and_in_flight_start_empty(book: TurnBook) -> None:
    assert book.held_among([]) == (set(), set())
    assert book.held_among(["nothing"]) == (set(), set())
    assert book.in_flight() == []
    assert book.release_and_take(["nothing"], True) == []


# --- what the book shows -----------------------------------------------------


def test_the_view_counts_each_owner_the_oldest_held_and_the_capacity(book: TurnBook) -> None:
    empty = book.view()
    assert (empty.owners, empty.oldest_held, empty.capacity, empty.held) == ({}, None, 0, 0)
    book.register("worker-1", 2, 60)
    book.register("worker-2", 3, 60)  # a window of seven
    before = time.time()
    assert len(hold_each(book, held("A", *(f"a{n}" for n in range(9))))) == 7
    after = time.time()
    time.sleep(0.05)
    hold_each(book, held("B", "b1"))
    view = book.view()
    assert view.owners == {"A": OwnerCount(held=2, in_flight=7), "B": OwnerCount(held=1)}
    assert view.held == 3
    assert view.capacity == 5
    assert view.oldest_held is not None
    assert before - 0.5 <= view.oldest_held <= after + 0.5  # (the database's clock on PostgreSQL)
    book.unregister("worker-2")
    assert book.view().capacity == 2


def test_a_worker_whose_registration_expired_no_longer_counts(book: TurnBook) -> None:
    book.register("worker-1", 2, 0.5)  # a window of three, for half a second
    assert hold_each(book, held("A", "a1", "a2", "a3", "a4", "a5")) == ["a1", "a2", "a3"]
    assert book.view().capacity == 2
    time.sleep(0.7)
    assert book.view().capacity == 0
    # The window falls to the floor: one in flight, whatever was in flight before.
    assert book.release_and_take(["a1"], True) == []
    assert book.release_and_take(["a2"], True) == []
    assert book.release_and_take(["a3"], True) == ["a4"]
    assert len(book.in_flight()) == FLOOR == 1
    book.register("worker-1", 1, 60)
    assert book.release_and_take([], True) == ["a5"]


# --- several objects on one book, stepping at once ---------------------------

THREADS, HOLDS = 4, 50


def test_books_stepping_at_once_take_every_task_exactly_once(make_book: MakeBook) -> None:
    books = [make_book(), make_book()]
    books[0].register("worker-1", 3, 60)  # a window of four
    takes: list[list[str]] = [[] for _ in range(THREADS)]
    failures: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def stepper(n: int) -> None:
        book, mine = books[n % 2], takes[n]
        try:
            start.wait()
            for i in range(HOLDS):
                entry = Entry(f"t{n}-{i}", owner=f"owner-{(n + i) % 3}", priority=i % 3)
                mine += book.hold_and_take([entry], True)
                if i % 2:  # one of what this thread saw taken finishes
                    done = [mine[len(mine) // 2]] if mine else []
                    mine += book.release_and_take(done, True)
        except BaseException as error:  # reported by the test
            failures.append(error)

    threads = [threading.Thread(target=stepper, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert failures == []
    # Drain: finish whatever is in flight until nothing is held.
    drained: list[str] = []
    for _ in range(THREADS * HOLDS):
        flying = books[1].in_flight()
        if not flying:
            break
        drained += books[1].release_and_take(flying, True)
    taken = [task for mine in takes for task in mine] + drained
    every = [f"t{n}-{i}" for n in range(THREADS) for i in range(HOLDS)]
    assert [task for task, count in Counter(taken).items() if count > 1] == []
    assert sorted(taken) == sorted(every)
    assert books[0].view().owners == {}


def test_a_file_stores_turn_book_kept_before_documents_is_taken_over(tmp_path: Path) -> None:
    """A directory written by a version that kept the book in
    `.turns/book.json`: what the book held keeps its turn."""
    earlier = TurnState()
    earlier.hold_and_take([Entry("held-1", "alice")], True, 1.0)  # no slot: held
    earlier.register("worker@host", 2, 60.0, time.time())
    (tmp_path / "tasks" / ".turns").mkdir(parents=True)
    (tmp_path / "tasks" / ".turns" / "book.json").write_text(json.dumps(earlier.to_json()))
    book = file_store(tmp_path / "tasks").turn_book()
    assert book.held_among(["held-1"]) == earlier.held_among(["held-1"]) != (set(), set())
    assert book.view().capacity == 2
    assert not (tmp_path / "tasks" / ".turns" / "book.json").exists()
    # Opened again (another process): the document stands, nothing taken over twice.
    assert file_store(tmp_path / "tasks").turn_book().view().capacity == 2


def test_a_file_stores_documents_kept_as_files_are_taken_over(tmp_path: Path) -> None:
    """A directory written by a version that kept small documents as files
    (`.documents/<name>.json`, an index as one document): the turn book, a
    task's push state and the index of tasks swept read back whole from the
    database; an expired document is not carried over; the folder goes."""
    earlier = TurnState()
    earlier.hold_and_take([Entry("held-1", "alice")], True, 1.0)
    earlier.register("worker@host", 2, 60.0, time.time())
    folder = tmp_path / "tasks" / ".documents"
    folder.mkdir(parents=True)
    push = {"configs": {"a": {"id": "a", "taskId": "t1", "url": "https://x.example/h"}}}
    kept = {
        "turn-book": {"version": "v1", "value": earlier.to_json(), "expires": None},
        f"push:{digest('push', 't1')}": {"version": "v2", "value": push, "expires": None},
        "index:pushing": {"version": "v3", "value": {"t1": 5.0}, "expires": None},
        "owner-bucket:gone": {"version": "v4", "value": {"tokens": 1}, "expires": 1.0},
    }
    for name, document in kept.items():
        (folder / f"{name}.json").write_text(json.dumps(document))
    (folder / "stripe-3.lock").touch()
    store = file_store(tmp_path / "tasks")
    assert store.turn_book().view().capacity == 2
    assert store.turn_book().held_among(["held-1"]) == earlier.held_among(["held-1"])
    assert [c["id"] for c in store.push_store().configs("t1")] == ["a"]
    assert store.push_store().pushing() == ["t1"]
    assert store.documents.document("owner-bucket:gone").value is None
    assert not folder.exists()


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_a_write_that_ends_a_task_takes_it_out_of_flight_in_its_own_transaction(
    kind: str, stores: Stores
) -> None:
    """On a store over SQLite the write that ends a task and the step of its
    book that takes it out of flight commit as one transaction: never one
    without the other, and one commit for both."""
    store = stores.open(kind)
    book = store.turn_book()
    task_id = store.create(new_task(text_message("user", "hi"))).task["id"]
    assert book.hold_and_take(held("", task_id), fair=True) == [task_id]
    transition(store, task_id, to_state(WORKING))
    assert book.in_flight() == [task_id]  # working: still in flight
    statements: list[str] = []
    connection, _ = store.database._connection()
    connection.set_trace_callback(statements.append)
    try:
        transition(store, task_id, to_state(COMPLETED))
    finally:
        connection.set_trace_callback(None)
    assert book.in_flight() == []
    assert statements.count("BEGIN IMMEDIATE") == 1, statements  # one write transaction
    assert "ROLLBACK" not in statements
    assert any("UPDATE documents" in s and "turn-book" in s for s in statements), statements
