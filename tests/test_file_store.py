"""The file store: the SQLite store inside a directory, each task also a
`<id>.json` file that is the task itself; a directory an earlier version
wrote is taken over whole when the store opens."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import pytest

from shared.events import artifact_update, to_state
from shared.generation import generation_of
from shared.store.contract import message_key
from shared.store.listing import Query
from shared.stores.file.store import FileStore, file_store
from shared.stores.sqlite.store import sqlite_store
from shared.task import new_task, text_message
from shared.transitions import transition


def a_task(owner: str = "alice") -> Any:
    task = new_task(text_message("user", "hello"), owner=owner)
    task["owner"] = owner
    return task


def test_the_file_is_the_task_itself_after_each_whole_write(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    task = store.create(a_task()).task
    path = tmp_path / f"{task['id']}.json"
    assert json.loads(path.read_text()) == task
    assert '\n  "status": {' in path.read_text()  # pretty-printed: greppable
    assert transition(store, task["id"], to_state("working")).applied
    artifact = {"artifactId": "a", "parts": [{"kind": "text", "text": "chunk"}]}
    assert transition(store, task["id"], lambda t: [artifact_update(t, artifact)]).applied
    assert transition(store, task["id"], to_state("completed")).applied  # at rest: written whole
    assert json.loads(path.read_text()) == store.get(task["id"])
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_task_file_holds_an_integer_past_64_bits_as_written(tmp_path: Path) -> None:
    """orjson writes the task files and refuses such an integer: the standard
    library writes that file instead, and the task reads back whole."""
    store = file_store(tmp_path)
    task = a_task()
    task["metadata"] = {"big": 2**70, "text": "caf\u00e9"}
    made = store.create(task).task
    path = tmp_path / f"{made['id']}.json"
    assert json.loads(path.read_text())["metadata"] == {"big": 2**70, "text": "caf\u00e9"}
    assert "café" in path.read_text(encoding="utf-8")  # UTF-8, not escaped
    assert FileStore(tmp_path).get(made["id"]) == made


@pytest.mark.parametrize("content", [None, b"{truncated", b"[1, 2]", b'{"id": "x"}', b""])
def test_a_missing_or_corrupt_file_reads_as_an_unknown_task(
    tmp_path: Path, content: bytes | None
) -> None:
    store = file_store(tmp_path)
    task_id = store.create(a_task()).task["id"]
    path = tmp_path / f"{task_id}.json"
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content)
    assert store.get(task_id) is None
    assert not transition(store, task_id, to_state("working")).applied
    assert file_store(tmp_path).get(task_id) is None  # another process reads the same


def test_a_file_written_by_hand_is_adopted_with_its_status_as_the_next_event(
    tmp_path: Path,
) -> None:
    store = file_store(tmp_path)
    task = store.create(a_task()).task
    edited = {**task, "status": {"state": "canceled", "timestamp": "2030-01-01T00:00:00Z"}}
    (tmp_path / f"{task['id']}.json").write_text(json.dumps(edited))
    assert store.get(task["id"]) == edited
    assert [event["status"]["state"] for _, event in store.events(task["id"], 0)] == [
        "submitted",
        "canceled",
    ]
    assert store.read(task["id"]).seq == 2  # type: ignore[union-attr]
    seed = {"id": "seed-task", "status": {"state": "submitted"}}  # the seed's store wrote these
    (tmp_path / "seed-task.json").write_text(json.dumps(seed))
    assert store.get("seed-task") == seed
    assert transition(store, "seed-task", to_state("working")).applied


def test_bare_task_files_are_listed_once_the_store_opens(tmp_path: Path) -> None:
    for n in range(3):
        task = {"id": f"t{n}", "status": {"state": "completed", "timestamp": f"2026-01-0{n + 1}"}}
        (tmp_path / f"t{n}.json").write_text(json.dumps(task))
    store = file_store(tmp_path)
    query = Query("", None, None, None, 10, time.time(), None)
    assert [t["id"] for t in store.listing(query).tasks] == ["t2", "t1", "t0"]


def test_a_purged_task_takes_its_file_with_it(tmp_path: Path) -> None:
    now = [time.time()]
    store = file_store(tmp_path, lambda: now[0], terminal_ttl=10)
    task_id = store.create(a_task()).task["id"]
    assert transition(store, task_id, to_state("canceled")).applied
    now[0] += 11
    assert store.get(task_id) is None
    assert store.purge_expired() == 1
    assert not (tmp_path / f"{task_id}.json").exists()


def test_time_index_markers_of_an_earlier_version_are_taken_over(tmp_path: Path) -> None:
    """A directory whose time indexes were marker files (`.working/<id>` and
    the like, scored by their mtime): they read back as the same indexes,
    with the same scores, and the folders go."""
    for folder, task_id, when in (
        (".working", "t-working", 1_000.0),
        (".waiting", "t-waiting", 2_000.0),
        (".interrupted", "t-interrupted", 3_000.0),
    ):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / task_id).touch()
        os.utime(tmp_path / folder / task_id, (when, when))
    store = file_store(tmp_path)
    assert store.indexes.range("working") == [("t-working", 1_000.0)]
    assert store.indexes.range("waiting") == [("t-waiting", 2_000.0)]
    assert store.indexes.range("interrupted") == [("t-interrupted", 3_000.0)]
    assert not any((tmp_path / folder).exists() for folder in (".working", ".waiting"))
    assert not (tmp_path / ".interrupted").exists()


@pytest.mark.parametrize("synced", [False, True])
def test_after_a_boot_unsynced_numbers_start_a_new_lineage(tmp_path: Path, synced: bool) -> None:
    """A database whose transactions are not synced as they commit may have
    lost its last ones to a power cut, and with them numbers a client holds:
    each task's first write after the boot numbers on from the clock in
    microseconds (a resume from an older id then gets the Task), and its
    generation is unknown from then on. Synced, numbers run on by one."""
    path = tmp_path / "tasks.db"
    before = sqlite_store(path, fsync=synced, booted=1_000.0)
    task_id = before.create(a_task()).task["id"]
    assert transition(before, task_id, to_state("working")).applied
    assert before.read(task_id).seq == 2  # type: ignore[union-attr]
    after = sqlite_store(path, fsync=synced, booted=2_000.0)  # the machine went down between
    assert transition(after, task_id, to_state("completed")).applied
    record = after.read(task_id)
    assert record is not None and record.task["status"]["state"] == "completed"
    if synced:
        assert record.seq == 3 and generation_of(record.task) == 3
    else:
        assert record.seq > time.time() * 1_000_000 - 60_000_000
        assert generation_of(record.task) == 0  # unknown
    assert sqlite_store(path, fsync=synced, booted=2_000.0).read(task_id) == record


@pytest.mark.parametrize("policy", ["always", "everysec", "no"])
def test_after_a_boot_every_file_not_the_one_recorded_is_written_again_from_the_database(
    tmp_path: Path, policy: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Task files are not synced as they are written (the database is the
    record): a power cut may leave one missing, empty, or an earlier one. The
    first open after the boot writes each of them again from the database,
    synced; a file that is the recorded one is left as it is."""
    before = FileStore(tmp_path, fsync=policy, booted=1_000.0)
    ids = [before.create(a_task()).task["id"] for _ in range(4)]
    earlier = {i: (tmp_path / f"{i}.json").read_bytes() for i in ids}
    for task_id in ids:  # a state it rests in: each file written whole again
        assert transition(before, task_id, to_state("working")).applied
        assert transition(before, task_id, to_state("completed")).applied
    expected = {task_id: before.get(task_id) for task_id in ids}
    missing, empty, older, kept = (tmp_path / f"{i}.json" for i in ids)
    missing.unlink()
    empty.write_bytes(b"")
    older.write_bytes(earlier[ids[2]])  # the file before the last write, as a cut may leave it
    untouched = kept.stat()

    with caplog.at_level("WARNING", logger="shared.stores.file.store"):
        after = FileStore(tmp_path, fsync=policy, booted=2_000.0)  # the machine went down

    assert "3 task files written again" in caplog.text
    for task_id in ids:
        assert json.loads((tmp_path / f"{task_id}.json").read_text()) == expected[task_id]
        record = after.read(task_id)
        assert record is not None and record.task == expected[task_id]
    assert (kept.stat().st_ino, kept.stat().st_mtime_ns) == (
        untouched.st_ino,
        untouched.st_mtime_ns,
    )
    assert "adopting" not in caplog.text  # written from the record, not taken in as edits


def test_without_a_boot_a_missing_file_stays_an_unknown_task(tmp_path: Path) -> None:
    """Only a boot says a file may be lost rather than deleted: opened again
    on the same boot, a deleted file is still an unknown task (the seed's
    contract)."""
    store = FileStore(tmp_path, booted=1_000.0)
    task_id = store.create(a_task()).task["id"]
    (tmp_path / f"{task_id}.json").unlink()
    assert FileStore(tmp_path, booted=1_000.0).get(task_id) is None
    assert not (tmp_path / f"{task_id}.json").exists()


def _cut_before_its_commit(store: FileStore, task_id: str) -> None:
    """What a create cut off between its file's rename and its commit leaves:
    the file, and nothing of the create in the database (its transaction
    rolled back: the row, its log and history, its time index, its context)."""
    statements = [
        f"DELETE FROM {table} WHERE {column} = ?"
        for table, column in (
            ("tasks", "id"),
            ("events", "task_id"),
            ("history", "task_id"),
            ("files", "id"),
            ("indexes", "member"),
        )
    ]
    store.database.write(
        lambda c: (
            [c.execute(statement, (task_id,)) for statement in statements]
            + [c.execute("DELETE FROM contexts")]
        )
    )


@pytest.mark.parametrize("retried_first", [False, True])
def test_a_create_cut_off_before_its_commit_leaves_one_task_for_its_send(
    tmp_path: Path, retried_first: bool
) -> None:
    """The send was never acknowledged; its sender retries with the same
    messageId. Whichever comes first, the retry or a process that opens the
    directory (or reads the file), one task stands for the send."""
    store = file_store(tmp_path)
    task = a_task()
    key = message_key("alice", task["history"][0]["messageId"])
    orphan = store.create(task, key).task["id"]
    _cut_before_its_commit(store, orphan)
    retry = {**a_task(), "history": task["history"]}
    if retried_first:
        made = store.create(retry, key)
        assert made.created
        assert file_store(tmp_path).get(orphan) is None  # another process opens: not taken in
        assert store.get(orphan) is None
        assert store.create(a_task(), key).task["id"] == retry["id"]
    else:
        assert file_store(tmp_path).get(orphan) == task  # taken in when a process opens
        made = store.create(retry, key)
        assert not made.created and made.task["id"] == orphan
    assert store.waiting(math.inf) == [made.task["id"]]  # the one beat sends on


def test_a_file_left_by_a_write_that_rolled_back_is_written_over_by_the_next(
    tmp_path: Path,
) -> None:
    """A write killed between its file's rename and its commit leaves a file
    the database did not record; a write that does not read the file first
    (a worker's claim) writes the task whole over it, so the file is the task
    as committed again."""
    store = file_store(tmp_path)
    task = store.create(a_task()).task
    path = tmp_path / f"{task['id']}.json"
    rolled_back = {**task, "status": {"state": "canceled", "timestamp": "2030-01-01T00:00:00Z"}}
    path.write_text(json.dumps(rolled_back))
    claimed = store.claim(task["id"], "submitted", to_state("working")(task)[0])
    assert claimed.applied
    assert json.loads(path.read_text()) == claimed.task == store.get(task["id"])
    assert store.get(task["id"])["status"]["state"] == "working"  # type: ignore[index]


def test_tasks_without_their_counts_are_counted_when_the_store_opens(tmp_path: Path) -> None:
    """A database whose tasks were written before their counts were kept."""
    path = tmp_path / "tasks.db"
    store = sqlite_store(path)
    for _ in range(3):
        store.create(a_task())
    store.database.write(lambda c: c.execute("DELETE FROM counts"))
    query = Query("alice", None, "submitted", None, 10, time.time(), None)
    assert sqlite_store(path).listing(query).total == 3


def test_processes_forked_while_threads_write_open_their_own_and_corrupt_nothing(
    tmp_path: Path,
) -> None:
    """A Celery pool child is forked from a worker whose threads write the
    store (heartbeats, the slot keeper): whenever the fork comes, the child
    opens its own connection at once (no mutex of SQLite's left held in it)
    and writes, and the parent's connections, never closed in the child, lose
    nothing of the database."""
    import signal
    import sqlite3
    import threading

    path = tmp_path / "tasks.db"
    store = sqlite_store(path, fsync=False)
    stop = threading.Event()

    def writer() -> None:
        while not stop.wait(0.001):  # busy, yet leaving the lock to others now and then
            task_id = store.create(a_task()).task["id"]
            transition(store, task_id, to_state("working"))

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for thread in threads:
        thread.start()
    store.get("the-main-threads-connection")
    made = []
    try:
        for _ in range(20):
            child = os.fork()
            if child == 0:  # the child: a deadline of its own, then a write
                ok = False
                try:
                    signal.alarm(10)
                    task_id = store.create(a_task()).task["id"]
                    ok = transition(store, task_id, to_state("working")).applied
                finally:
                    os._exit(0 if ok else 1)  # never back into pytest
            _, status = os.waitpid(child, 0)
            made.append(status)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert made == [0] * 20  # each child wrote and exited, none killed by its alarm
    assert sqlite3.connect(path).execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert len(sqlite_store(path).all()) >= 20
