"""A file store's lock whose holder is paused stalls nobody for long.

`flock` cannot be made cooperative: a gunicorn worker blocked in it stops
answering anything, even /healthz, until its arbiter kills it, and a holder
stopped with SIGSTOP never lets go while it sleeps. So the file store's
turn book and send limiters take their locks within a deadline; a send whose
turn book is locked by a stalled process goes to the broker at once, out of
turn, and its task still runs.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from shared import Settings
from shared.documents import ABSENT
from shared.errors import StoreError
from shared.owners.book import Entry
from shared.stores.file.store import DATABASE, file_store
from shared.task import new_task, text_message
from web.core.params import send_params
from web.core.tasks import Tasks

HOLD = """
import sqlite3, sys, time
held = []
for path in sys.argv[1:]:
    if path.endswith(".db"):  # a SQLite database: its write lock
        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("BEGIN IMMEDIATE")
        held.append(connection)
    else:
        raise SystemExit(f"not a database: {path}")
print("held", flush=True)
time.sleep(600)
"""


def _paused_holder(*paths: Path) -> subprocess.Popen[str]:
    """A process that takes the locks on `paths`, then is stopped (SIGSTOP)."""
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, *map(str, paths)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    os.kill(holder.pid, signal.SIGSTOP)
    return holder


def _end(holder: subprocess.Popen[str]) -> None:
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(10)


class Recording:
    """A dispatcher that takes turns and records what it publishes."""

    takes_turns = True

    def __init__(self) -> None:
        self.enqueued: list[str] = []

    def enqueue(self, task_id: str) -> None:
        self.enqueued.append(task_id)

    def revoke(self, task_id: str) -> None:
        pass

    def check(self) -> None:
        pass


def test_a_send_whose_turn_book_cannot_be_stepped_goes_out_of_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The book's document given up on (as when its lock stays held past
    the deadline) at the book's own step, the rest of the store working: the
    send is accepted and published at once, out of turn. The step is the
    book's own for a send naming a webhook (held after its webhook is saved);
    a send without one is held inside the create's own transaction, so with
    its task or not at all (`test_send_round_trips.py`)."""
    store = file_store(str(tmp_path / "tasks"))
    book = store.turn_book()
    book.hold_and_take([Entry("earlier", "someone")], True)  # the book exists, its window full
    documents = store.documents
    reading = documents.document

    def stalled(name: str) -> Any:
        if name == "turn-book":
            raise StoreError("task store: the book stayed locked for 2 s", "stayed locked")
        return reading(name)

    monkeypatch.setattr(documents, "document", stalled)
    dispatcher = Recording()
    tasks = Tasks(Settings(push=True), store, dispatcher)
    message = {"role": "user", "messageId": "m-1", "parts": [{"kind": "text", "text": "hello"}]}
    webhook = {"pushNotificationConfig": {"url": "https://example.com/hook"}}
    sent = tasks.send(
        send_params({"message": message, "configuration": webhook}), "", blocking=False
    )
    task_id = sent.task["id"]  # accepted, not failed
    assert sent.task["status"]["state"] == "submitted"
    assert dispatcher.enqueued == [task_id]  # published at once, out of turn
    task = store.get(task_id)
    assert task is not None and task["status"]["state"] == "submitted"


def test_a_write_whose_database_is_locked_by_a_stalled_process_fails_instead_of_hanging(
    tmp_path: Path,
) -> None:
    """The database's write lock held by a paused process (SIGSTOP inside a
    transaction): a write that needs it is refused within the deadline, and
    writes go on once the holder is gone."""
    store = file_store(str(tmp_path / "tasks"))
    task = new_task(text_message("user", "hello"))
    store.indexes.add("test", "made", 1.0)  # the database exists
    holder = _paused_holder(store.directory / DATABASE)
    try:
        with pytest.raises(StoreError, match="stayed locked for 2 s"):  # the deadline, not for ever
            store.create(task, None)
        assert store.indexes.range("test") == [("made", 1.0)]  # reads go on meanwhile
    finally:
        _end(holder)
    assert store.create(task, None).created


def test_a_process_forked_while_a_thread_writes_a_document_does_not_keep_the_lock(
    tmp_path: Path,
) -> None:
    """A Celery prefork child started while the worker's slot keeper writes
    the turn book (a document) gets a copy of the database's descriptors;
    once the write ends, the database is free all the same (else every send
    would go out of turn, and every held task wait, for as long as that
    child lives)."""
    writing, forked = threading.Event(), threading.Event()

    def clock() -> float:  # read inside the write, with the lock held
        if threading.current_thread() is not threading.main_thread():
            writing.set()
            forked.wait(10)
        return time.time()

    first = file_store(str(tmp_path), clock).documents
    writer = threading.Thread(target=first.swap, args=("turn-book", ABSENT, {"n": 1}))
    writer.start()
    assert writing.wait(10)
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    child.start()  # a pool child, forked while the lock is held
    try:
        forked.set()
        writer.join(10)
        again = file_store(str(tmp_path)).documents
        found = again.document("turn-book")
        assert again.swap("turn-book", found.version, {"n": 2})  # within the deadline
    finally:
        child.kill()
        child.join(10)
    assert file_store(str(tmp_path)).documents.document("turn-book").value == {"n": 2}
