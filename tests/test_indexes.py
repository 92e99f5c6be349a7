"""Every store's scored indexes keep one contract (`shared.indexes`): a
member in once at its latest score, read in order of score (ties in order
of their text) up to a score and a limit, taken out by name."""

from __future__ import annotations

import math
from typing import Any

import pytest

from shared.indexes import Indexes
from tests.support.store_kinds import SHARED, Stores


def indexes_of(store: Any) -> Indexes:
    indexes: Indexes = store.indexes
    return indexes


def test_members_are_read_in_order_of_score_then_text(store_kind: str, stores: Stores) -> None:
    indexes = indexes_of(stores.open(store_kind))
    assert indexes.range("test") == []
    indexes.add("test", "b", 2.0)
    indexes.add("test", "c", 1.5)
    indexes.add("test", "a", 2.0)
    indexes.add("test", "d", -1.0)
    indexes.add("other", "z", 0.0)  # each name its own
    assert indexes.range("test") == [("d", -1.0), ("c", 1.5), ("a", 2.0), ("b", 2.0)]
    assert indexes.range("test", upto=1.5) == [("d", -1.0), ("c", 1.5)]
    assert indexes.range("test", upto=math.inf, limit=3) == [("d", -1.0), ("c", 1.5), ("a", 2.0)]
    assert indexes.range("test", upto=-2.0) == []
    assert indexes.range("other") == [("z", 0.0)]


def test_a_member_added_again_moves_and_a_removed_one_is_gone(
    store_kind: str, stores: Stores
) -> None:
    indexes = indexes_of(stores.open(store_kind))
    indexes.add("test", "a", 1.0)
    indexes.add("test", "b", 2.0)
    indexes.add("test", "a", 1_765_000_000.25)  # a time, kept to its fraction
    assert indexes.range("test") == [("b", 2.0), ("a", 1_765_000_000.25)]
    indexes.remove("test", "b", "never-there")
    indexes.remove("never-made", "a")
    indexes.remove("test")  # nothing named: nothing happens
    assert indexes.range("test") == [("a", 1_765_000_000.25)]
    indexes.remove("test", "a")
    assert indexes.range("test") == []


@pytest.mark.parametrize("store_kind", SHARED)
def test_an_index_is_shared_by_every_process_on_the_store(store_kind: str, stores: Stores) -> None:
    first = stores.open(store_kind)
    second = stores.open(store_kind)
    indexes_of(first).add("test", "a", 1.0)
    assert indexes_of(second).range("test") == [("a", 1.0)]
    indexes_of(second).remove("test", "a")
    assert indexes_of(first).range("test") == []


def test_a_member_is_placed_in_some_indexes_and_out_of_others_at_once(
    store_kind: str, stores: Stores
) -> None:
    indexes = indexes_of(stores.open(store_kind))
    indexes.place("t1", {"working": 5.0, "waiting": None, "interrupted": None})
    indexes.place("t2", {"working": 7.0})
    assert indexes.range("working") == [("t1", 5.0), ("t2", 7.0)]
    indexes.place("t1", {"working": None, "waiting": 9.5})  # it moved on
    assert indexes.range("working") == [("t2", 7.0)]
    assert indexes.range("waiting") == [("t1", 9.5)]
    indexes.place("t1", {})  # nothing named: nothing happens
    assert indexes.range("waiting") == [("t1", 9.5)]


def test_a_rescore_moves_only_members_still_in_the_index(store_kind: str, stores: Stores) -> None:
    indexes = indexes_of(stores.open(store_kind))
    indexes.add("working", "a", 1.0)
    indexes.add("working", "b", 2.0)
    indexes.rescore("working", ["a", "gone"], 10.0)
    indexes.rescore("working", [], 99.0)
    assert indexes.range("working") == [("b", 2.0), ("a", 10.0)]  # "gone" was not brought in
    assert indexes.score("working", "a") == 10.0
    assert indexes.score("working", "gone") is None and indexes.score("never", "a") is None
