"""The file store's listing index (`shared.stores.file.positions`,
`shared.stores.file.listing`) against the definition of a listing: every
page equals what reading every task gives (`shared.store.listing.list_by_scan`),
with several OS processes writing to one directory, and after the index is
deleted, cut short, left behind by a writer that stopped half way, or never
written at all."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from shared.errors import StoreError
from shared.events import artifact_update, to_state
from shared.store.contract import message_key
from shared.store.listing import Listing, Query, list_by_scan
from shared.stores.file import listing as file_listing
from shared.stores.file.positions import PositionLog, placed
from shared.stores.file.store import FileStore, file_store
from shared.task import COMPLETED, SUBMITTED, WORKING, epoch, new_task, now_iso, text_message
from shared.transitions import transition

OWNERS = ("", "alice", "bob")


def _create(store: FileStore, owner: str, context: str, label: str) -> str:
    task = new_task(text_message("user", label), context, owner or None)
    return store.create(task, message_key(owner, label)).task["id"]


def _write_in_child(directory: str, seed: int, count: int) -> None:
    """One writer process: creates tasks for every owner, then moves some on."""
    store = file_store(directory)
    rng = random.Random(seed)
    ids = []
    for n in range(count):
        owner = OWNERS[n % len(OWNERS)]
        context = f"{owner or 'anon'}-{seed}-{n % 3}"
        ids.append(_create(store, owner, context, f"w{seed}-{n}"))
    for task_id in rng.sample(ids, count // 2):
        transition(store, task_id, to_state(WORKING))
    for task_id in rng.sample(ids, count // 4):
        transition(store, task_id, to_state(WORKING, text_message("agent", "more")))
    for task_id in rng.sample(ids, count // 4):
        record = store.read(task_id)
        if record is not None and record.task["status"]["state"] == WORKING:
            transition(store, task_id, to_state(COMPLETED))


def _queries(store: FileStore, size: int = 7) -> list[Query]:
    """Every kind of filter, over what the store holds."""
    tasks = list(store.all().values())
    contexts = sorted({t["contextId"] for t in tasks if t.get("owner", "") == "alice"})[:2]
    middle = (
        sorted(epoch(t["status"]["timestamp"]) for t in tasks)[len(tasks) // 2] if tasks else None
    )
    now = time.time()
    queries = [Query(owner, None, None, None, size, now, None) for owner in OWNERS]
    queries += [Query("alice", context, None, None, size, now, None) for context in contexts]
    queries += [
        Query(owner, None, state, None, size, now, None)
        for owner in OWNERS
        for state in (SUBMITTED, WORKING, COMPLETED)
    ]
    queries += [Query("alice", context, WORKING, None, size, now, None) for context in contexts]
    queries.append(Query("bob", None, None, middle, size, now, None))
    return queries


def _walk(answer: Any, query: Query) -> list[tuple[list[str], int]]:
    """Every page of `query`: each page's ids and total."""
    pages = []
    after = None
    for _ in range(1000):
        listing: Listing = answer(Query(**{**query.__dict__, "after": after}))
        pages.append(([task["id"] for task in listing.tasks], listing.total))
        if listing.last is None:
            return pages
        after = listing.last
    raise AssertionError("a listing that never ends")


def _assert_lists_as_a_scan(store: FileStore) -> None:
    tasks = store.all()
    for query in _queries(store):
        expected = _walk(
            lambda q: list_by_scan(tasks.values(), store._statuses, q),
            query,
        )
        assert _walk(store.listing, query) == expected, query


def test_processes_writing_at_once_list_as_a_scan_would(tmp_path: Path) -> None:
    directory = tmp_path / "tasks"
    watcher = file_store(directory)
    _assert_lists_as_a_scan(watcher)  # loaded empty, then follows the others' writes
    context = multiprocessing.get_context("spawn")
    writers = [
        context.Process(target=_write_in_child, args=(str(directory), seed, 40))
        for seed in range(4)
    ]
    for writer in writers:
        writer.start()
    while any(writer.is_alive() for writer in writers):
        # A listing waits for the writes in flight (`shared.stores.file.moment`);
        # four writers back to back may hold it off past its deadline.
        with contextlib.suppress(StoreError):
            watcher.listing(Query("alice", None, None, None, 5, time.time(), None))
        time.sleep(0.05)
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    assert len(watcher.all()) == 160
    _assert_lists_as_a_scan(watcher)  # the process that followed along
    _assert_lists_as_a_scan(file_store(directory))  # one that reads the log from its start


def _some_tasks(directory: Path, count: int = 30) -> FileStore:
    store = file_store(directory)
    for n in range(count):
        owner = OWNERS[n % len(OWNERS)]
        task_id = _create(store, owner, f"{owner or 'anon'}-{n % 2}", f"t{n}")
        if n % 3 == 0:
            transition(store, task_id, to_state(WORKING))
    return store


def test_a_deleted_index_is_rebuilt_from_the_task_files(tmp_path: Path) -> None:
    store = _some_tasks(tmp_path)
    _assert_lists_as_a_scan(store)
    (tmp_path / ".listing" / "positions.log").unlink()
    _assert_lists_as_a_scan(file_store(tmp_path))
    (tmp_path / ".listing" / "positions.log").unlink()
    _create(store, "alice", "alice-0", "after the loss")  # a new log, with one line
    _assert_lists_as_a_scan(store)


def test_a_directory_from_before_the_index_lists(tmp_path: Path) -> None:
    _some_tasks(tmp_path)
    for path in (tmp_path / ".listing").iterdir():
        path.unlink()
    (tmp_path / ".listing").rmdir()
    _assert_lists_as_a_scan(file_store(tmp_path))


@pytest.mark.parametrize("follower", [True, False])
def test_an_index_cut_short_mid_line_is_repaired(tmp_path: Path, follower: bool) -> None:
    store = _some_tasks(tmp_path)
    _assert_lists_as_a_scan(store)
    log = tmp_path / ".listing" / "positions.log"
    data = log.read_bytes()
    cut = data.index(b"\n", len(data) // 2) - 5  # inside a line
    with open(log, "r+b") as file:
        file.truncate(cut)
    reader = store if follower else file_store(tmp_path)
    _assert_lists_as_a_scan(reader)
    _create(store, "bob", "bob-0", "after the cut")
    _assert_lists_as_a_scan(reader)


def test_a_task_file_written_without_its_position_lists(tmp_path: Path) -> None:
    _some_tasks(tmp_path)
    task = new_task(text_message("user", "by hand"), "alice-0", "alice")
    task["status"] = {"state": WORKING, "timestamp": now_iso()}
    (tmp_path / f"{task['id']}.json").write_text(json.dumps(task))  # as a crash would leave it
    store = file_store(tmp_path)
    _assert_lists_as_a_scan(store)
    listed = store.listing(Query("alice", None, WORKING, None, 50, time.time(), None))
    assert task["id"] in [t["id"] for t in listed.tasks]


def test_a_position_whose_write_never_happened_is_put_right(tmp_path: Path) -> None:
    """A writer logs a task's position, then stops before writing the task:
    the listing reads the task as it stands and logs that instead."""
    store = _some_tasks(tmp_path)
    log = PositionLog(tmp_path / ".listing", store._durability)
    victim = next(iter(store.all().values()))
    ahead: Any = {**victim, "status": {"state": COMPLETED, "timestamp": now_iso()}}
    never = new_task(text_message("user", "never written"), "alice-0", "alice")
    log.append([placed(victim["id"], ahead), placed(never["id"], never)])
    _assert_lists_as_a_scan(store)
    _assert_lists_as_a_scan(file_store(tmp_path))


def test_a_log_past_its_slack_is_compacted_and_still_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_listing, "_SLACK", 10)
    store = _some_tasks(tmp_path, 12)
    other = file_store(tmp_path)
    _assert_lists_as_a_scan(other)
    for task_id in list(store.all())[:6]:
        for n in range(5):
            transition(store, task_id, to_state(WORKING, text_message("agent", f"{n}")))
    _assert_lists_as_a_scan(store)  # compacts
    log = tmp_path / ".listing" / "positions.log"
    lines = [line for line in log.read_bytes().split(b"\n") if line]
    assert json.loads(lines[0]) == {"compacted": True}
    assert len(lines) <= 1 + 12
    _assert_lists_as_a_scan(other)  # reads the rewritten log
    _assert_lists_as_a_scan(file_store(tmp_path))


def test_finished_tasks_leave_the_listing_once_expired(tmp_path: Path) -> None:
    clock = [time.time()]
    store = FileStore(tmp_path, clock=lambda: clock[0], terminal_ttl=60)
    done = _create(store, "", "c", "done")
    kept = _create(store, "", "c", "kept")
    transition(store, done, to_state(WORKING))
    transition(store, done, to_state(COMPLETED))
    query = Query("", None, None, None, 10, time.time(), None)
    assert {t["id"] for t in store.listing(query).tasks} == {done, kept}
    clock[0] += 61
    listing = store.listing(query)
    assert [t["id"] for t in listing.tasks] == [kept] and listing.total == 1
    assert store.purge_expired() == 1
    fresh = FileStore(tmp_path, clock=lambda: clock[0], terminal_ttl=60)
    assert [t["id"] for t in fresh.listing(query).tasks] == [kept]


def test_the_log_holds_one_line_per_change_of_position(tmp_path: Path) -> None:
    """An artifact or a message without a status change leaves the log as it is."""
    store = _some_tasks(tmp_path, 3)
    log = tmp_path / ".listing" / "positions.log"
    before = os.path.getsize(log)
    task_id = next(iter(store.all()))
    record = store.read(task_id)
    assert record is not None
    artifact = {"artifactId": "a", "parts": [{"kind": "text", "text": "x"}]}
    transition(store, task_id, lambda task: [artifact_update(task, artifact)])  # type: ignore[arg-type]
    assert os.path.getsize(log) == before
