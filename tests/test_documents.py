"""Every store's small documents keep one contract (`shared.documents`): a
read with the store's clock, a compare-and-set that no other write slips
past, versions that never come back, expiry; and `step`, which the
features are written over, loses no change among racing processes."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from shared.documents import ABSENT, Documents, step
from tests.support.polling import wait_for
from tests.support.postgres import execute
from tests.support.store_kinds import KINDS, SWEPT, Stores


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def documents_of(store: Any) -> Documents:
    documents: Documents = store.documents
    return documents


def test_a_document_is_written_only_over_the_version_read(store_kind: str, stores: Stores) -> None:
    documents = documents_of(stores.open(store_kind))
    empty = documents.document("test:a")
    assert (empty.version, empty.value) == (ABSENT, None)
    assert documents.swap("test:a", ABSENT, {"n": 1})
    assert not documents.swap("test:a", ABSENT, {"n": 2})  # it is there now
    first = documents.document("test:a")
    assert first.value == {"n": 1} and first.version != ABSENT
    assert documents.swap("test:a", first.version, {"n": 2, "list": [1, 2.5, "x"]})
    assert not documents.swap("test:a", first.version, {"n": 3})  # read before the last write
    second = documents.document("test:a")
    assert second.value == {"n": 2, "list": [1, 2.5, "x"]} and second.version != first.version
    assert documents.document("test:b").value is None  # each name its own


def test_a_deleted_document_written_again_is_not_the_one_read_before(
    store_kind: str, stores: Stores
) -> None:
    documents = documents_of(stores.open(store_kind))
    assert documents.swap("test:a", ABSENT, {"n": 1})
    before = documents.document("test:a")
    assert documents.swap("test:a", before.version, None)  # deleted
    assert documents.document("test:a").version == ABSENT
    assert documents.swap("test:a", ABSENT, {"n": 1})  # the same value again
    assert not documents.swap("test:a", before.version, {"n": 99})
    assert documents.document("test:a").value == {"n": 1}
    assert documents.swap("test:never", ABSENT, None)  # nothing there to delete: done


def test_a_document_with_a_time_to_live_is_gone_after_it(store_kind: str, stores: Stores) -> None:
    kind = KINDS[store_kind]
    clock = Clock() if kind.server is None else None
    documents = documents_of(stores.open(store_kind, clock=clock))
    assert documents.swap("test:brief", ABSENT, {"n": 1}, ttl=0.5)
    assert documents.swap("test:kept", ABSENT, {"n": 1})
    first = documents.document("test:brief")
    assert first.value == {"n": 1}
    if clock is not None:
        clock.now += 0.6
    else:  # the server's own clock
        wait_for(
            lambda: documents.document("test:brief").value is None,
            timeout=10,
            what="the document to expire",
        )
    gone = documents.document("test:brief")
    assert (gone.version, gone.value) == (ABSENT, None)
    # Expired is absent: a swap against the version it had changes nothing.
    assert not documents.swap("test:brief", first.version, {"n": 3})
    assert not documents.swap("test:brief", first.version, None)
    assert documents.swap("test:brief", ABSENT, {"n": 2})  # written anew over the expired one
    assert documents.document("test:brief").value == {"n": 2}
    assert documents.document("test:kept").value == {"n": 1}


def test_a_read_carries_the_stores_clock(store_kind: str, stores: Stores) -> None:
    kind = KINDS[store_kind]
    if kind.server is None:
        clock = Clock()
        assert documents_of(stores.open(store_kind, clock=clock)).document("x").now == clock.now
    else:  # the server's: this machine's clock here, give or take
        assert abs(documents_of(stores.open(store_kind)).document("x").now - time.time()) < 5


def test_racing_steps_through_several_connections_lose_no_change(
    store_kind: str, stores: Stores
) -> None:
    """Eight threads, each on a store object of its own where the store is
    shared (as processes are), add to one counter: every addition lands."""
    shared = KINDS[store_kind].shared
    first = documents_of(stores.open(store_kind, connections=2))
    each = [
        documents_of(stores.open(store_kind, connections=2)) if shared else first for _ in range(8)
    ]
    start = threading.Barrier(len(each))

    def add(value: Any, now: float) -> tuple[Any, float | None, None]:
        return {"n": (value or {"n": 0})["n"] + 1}, None, None

    def adder(documents: Documents) -> None:
        start.wait()
        for _ in range(25):
            step(documents, "test:counter", add)

    threads = [threading.Thread(target=adder, args=(documents,)) for documents in each]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert first.document("test:counter").value == {"n": 200}


def test_a_step_that_changes_nothing_writes_nothing(store_kind: str, stores: Stores) -> None:
    documents = documents_of(stores.open(store_kind))
    assert documents.swap("test:a", ABSENT, {"n": 1})
    before = documents.document("test:a").version
    assert step(documents, "test:a", lambda value, now: (value, None, "kept")) == "kept"
    assert documents.document("test:a").version == before


def test_any_name_is_only_a_key_never_a_path(store_kind: str, stores: Stores) -> None:
    store = stores.open(store_kind)
    documents = documents_of(store)
    for n, name in enumerate(("../x", "a/b", ".hidden", "x" * 200, "é\u2028")):
        assert documents.swap(name, ABSENT, {"n": n})
        assert documents.document(name).value == {"n": n}
    if store_kind == "file":
        assert not (store.directory.parent / "x").exists()
        assert not (store.directory / "a").exists()


def _still_kept(store_kind: str, store: Any, stores: Stores, name: str) -> bool:
    """Whether the store still holds the document `name` at all (a read
    skips an expired one; the purge is what gives its room back)."""
    if store_kind == "memory":
        return name in store.documents._kept
    if store_kind in ("file", "sqlite"):
        found = store.database.read("SELECT 1 FROM documents WHERE name = ?", (name,))
        return bool(found)
    rows = execute(stores.url(store_kind), "SELECT 1 FROM documents WHERE name = %s", (name,))
    return bool(rows)


@pytest.mark.parametrize("store_kind", SWEPT)
def test_the_reapers_purge_gives_back_the_room_of_expired_documents(
    store_kind: str, stores: Stores
) -> None:
    clock = Clock()
    store = stores.open(store_kind, clock=clock)
    documents = documents_of(store)
    assert documents.swap("test:brief", ABSENT, {"n": 1}, ttl=0.5)
    assert documents.swap("test:kept", ABSENT, {"n": 1}, ttl=60)
    if store_kind == "postgres":  # the database's clock: the document is made to have gone
        execute(
            stores.url(store_kind), "UPDATE documents SET expires = 0 WHERE name = 'test:brief'"
        )
    clock.now += 1
    assert _still_kept(store_kind, store, stores, "test:brief")
    store.purge_expired()
    assert not _still_kept(store_kind, store, stores, "test:brief")
    assert _still_kept(store_kind, store, stores, "test:kept")
    assert documents.document("test:kept").value == {"n": 1}
