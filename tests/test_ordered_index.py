"""The ordered index answers every listing exactly as reading every task
does (`shared.store.listing.list_by_scan`, the definition): generated
tasks of a few owners and contexts, each with a history of status changes,
some after the listing's moment; generated queries (owner, context, state,
statusTimestampAfter, page size) paged through to the end; every page's
tasks, total and cursor compared."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.store.listing import Listing, Query, list_by_scan
from shared.store.ordered import OrderedIndex
from shared.task import epoch, iso_at

STATES = ["submitted", "working", "input-required", "completed", "failed"]
BASE = 1_800_000_000.0

# A task: owner, context (or none), and its status changes as (second, state), in order.
TASK = st.tuples(
    st.sampled_from(["", "alice", "bob"]),
    st.sampled_from([None, "c1", "c2"]),
    st.lists(st.tuples(st.integers(0, 40), st.sampled_from(STATES)), min_size=1, max_size=4),
)


def world(specs: list[Any]) -> tuple[dict[str, Any], dict[str, list[tuple[float, str]]]]:
    tasks, histories = {}, {}
    for number, (owner, context, changes) in enumerate(specs):
        task_id = f"t{number:03}"
        moments = sorted(second for second, _ in changes)
        history = [
            (epoch(iso_at(BASE + second)), state)
            for second, (_, state) in zip(moments, changes, strict=True)
        ]
        changed, state = history[-1]
        task: dict[str, Any] = {
            "id": task_id,
            "status": {"state": state, "timestamp": iso_at(changed)},
        }
        if owner:
            task["owner"] = owner
        if context is not None:
            task["contextId"] = context
        tasks[task_id], histories[task_id] = task, history
    return tasks, histories


def pages(answer: Any, query: Query) -> list[tuple[list[str], int, Any]]:
    seen = []
    while True:
        listing: Listing = answer(query)
        seen.append(([task["id"] for task in listing.tasks], listing.total, listing.last))
        if listing.last is None or len(seen) > 50:
            return seen
        query = Query(**{**query.__dict__, "after": listing.last})


@settings(max_examples=300, deadline=None)
@given(
    specs=st.lists(TASK, max_size=25),
    owner=st.sampled_from(["", "alice", "bob"]),
    context=st.sampled_from([None, "c1", "c2", "c3"]),
    state=st.sampled_from([None, *STATES]),
    after_second=st.one_of(st.none(), st.integers(-1, 40)),
    as_of_second=st.integers(0, 45),
    size=st.integers(1, 6),
)
def test_the_index_lists_what_reading_every_task_lists(
    specs: list[Any],
    owner: str,
    context: str | None,
    state: str | None,
    after_second: int | None,
    as_of_second: int,
    size: int,
) -> None:
    tasks, histories = world(specs)
    index = OrderedIndex()
    for task_id, task in tasks.items():
        changed, current = histories[task_id][-1]
        index.place(task_id, task.get("owner", ""), task.get("contextId"), current, changed)
    updated_after = None if after_second is None else epoch(iso_at(BASE + after_second))
    query = Query(
        owner, context, state, updated_after, size, epoch(iso_at(BASE + as_of_second)), None
    )

    def by_index(asked: Query) -> Listing:
        return index.answer(asked, histories.__getitem__, lambda ids: [tasks[i] for i in ids])

    def by_scan(asked: Query) -> Listing:
        return list_by_scan(tasks.values(), histories.__getitem__, asked)

    assert pages(by_index, query) == pages(by_scan, query)


def test_a_task_moved_or_removed_leaves_no_trace_in_any_list() -> None:
    index = OrderedIndex()
    index.place("a", "alice", "c1", "working", 10.0)
    index.place("a", "bob", "c2", "completed", 20.0)  # a store of two methods may move it
    index.place("b", "alice", None, "working", 15.0)
    query = Query("alice", None, None, None, 10, 100.0, None)
    read = lambda ids: [{"id": i} for i in ids]  # noqa: E731
    assert [t["id"] for t in index.answer(query, lambda _: [], read).tasks] == ["b"]
    index.remove("b")
    index.remove("b")  # twice: nothing left to remove
    assert index.answer(query, lambda _: [], read).total == 0
    bob = Query("bob", "c2", "completed", None, 10, 100.0, None)
    assert [t["id"] for t in index.answer(bob, lambda _: [], read).tasks] == ["a"]
    index.remove("a")
    assert len(index) == 0 and index._lists == {}


def test_a_task_placed_again_in_its_state_moves_within_its_lists() -> None:
    index = OrderedIndex()
    read = lambda ids: [{"id": i} for i in ids]  # noqa: E731
    index.place("a", "alice", "c1", "working", 10.0)
    index.place("b", "alice", "c1", "working", 15.0)
    index.place("a", "alice", "c1", "working", 20.0)  # a progress update: newer, same state
    for scope in (
        Query("alice", None, None, None, 10, 100.0, None),
        Query("alice", "c1", None, None, 10, 100.0, None),
        Query("alice", None, "working", None, 10, 100.0, None),
    ):
        assert [t["id"] for t in index.answer(scope, lambda _: [], read).tasks] == ["a", "b"]
    index.place("a", "bob", "c1", "working", 20.0)  # the same state and time, another owner
    alice = Query("alice", None, "working", None, 10, 100.0, None)
    assert [t["id"] for t in index.answer(alice, lambda _: [], read).tasks] == ["b"]
    bob = Query("bob", "c1", "working", None, 10, 100.0, None)
    assert [t["id"] for t in index.answer(bob, lambda _: [], read).tasks] == ["a"]
    index.remove("a")
    index.remove("b")
    assert len(index) == 0 and index._lists == {}
