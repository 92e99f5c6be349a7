"""SQLite: one database file on one host, shared by its processes.

Each write is one `BEGIN IMMEDIATE` transaction (`shared.stores.sqlite.database`):
the compare, the append, the listing columns, the time indexes, the log's
trim commit together, or not at all. A task is its row's document (as of
event `base`) with the events after it folded over it, read in one
statement (`shared.stores.sql.tasks`, the task log's SQL). Other processes' writes are seen
by polling each watched task's last event number; this process's wake its
waiters at once. The turn book, send limits and push state are the features
written once over the database's small documents and scored indexes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from shared.broker.outbox import OutboxMessage
from shared.errors import StoreError
from shared.events import Event, StatusUpdate, current_status
from shared.owners.book import DocumentBook, Entry
from shared.push.contract import Once
from shared.store.contract import (
    LOG_LIMIT,
    Commit,
    Created,
    Outcome,
    Record,
    is_safe_id,
    require_safe_id,
)
from shared.store.features import DocumentFeatures
from shared.store.listing import Listing, Query
from shared.store.time_indexes import TimeIndexed, TimeIndexes
from shared.store.wakeups import Notifier, Poller, Waiter
from shared.stores.sql.dialects import SQLITE
from shared.stores.sql.documents import SqlDocuments
from shared.stores.sql.indexes import SqlIndexes
from shared.stores.sql.listing import answer
from shared.stores.sql.runner import Transaction
from shared.stores.sql.tasks import Copy, TaskLog, listed_as_of, read_all, read_one
from shared.stores.sql.tasks import events as logged
from shared.stores.sqlite import tables
from shared.stores.sqlite.boot import booted_at
from shared.stores.sqlite.database import Database
from shared.stores.sqlite.runner import InWrite, SqliteRunner
from shared.task import IN_FLIGHT, Task, state_of

Clock = Callable[[], float]
_POLL = 0.05  # how often watched tasks are read for other processes' writes, seconds
_ALIVE = "(expires IS NULL OR expires > ?)"
_PURGE_BATCH = 1000


class SqliteStore(TimeIndexed, DocumentFeatures):
    documents: SqlDocuments
    lists_by_scan = False  # ListTasks reads the page from the listing indexes
    SCHEMA: tuple[str, ...] = tables.SCHEMA

    def __init__(
        self,
        path: str | Path,
        clock: Clock = time.time,
        terminal_ttl: float | None = None,
        *,
        fsync: bool = True,
        log_limit: int = LOG_LIMIT,
        booted: float | None = None,
        copy: Copy | None = None,
    ) -> None:
        """`fsync`: each transaction synced as it commits (`synchronous=FULL`);
        `booted`: when this machine booted (default: as Linux says); `copy`:
        a copy of each task kept beside the tables."""
        self.path = Path(path)
        self._clock = clock
        self.database = Database(self.path, self.SCHEMA, fsync=fsync)
        runner = SqliteRunner(self.database)
        self.documents = SqlDocuments(runner, clock)
        self.indexes = SqlIndexes(runner)
        self._times = TimeIndexes(self.indexes, clock)
        ttl = float(terminal_ttl) if terminal_ttl else 0.0
        self._log = TaskLog(ttl, log_limit, self._times.scores, copy)
        self._turns = DocumentBook(self.documents)
        self._push = Once()
        self._notifier = Notifier()
        self._poller = Poller(self._notifier, self._stamp, every=_POLL, name="toolnexus-sqlite")
        self._synced = fsync
        self._opened(booted_at() if booted is None else booted)

    # --- the contract ------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        record = self.read(task_id)
        return record.task if record is not None else None

    def save(self, task: Task) -> Task:
        require_safe_id(task.get("id"))
        self._change(lambda c, now: self._written(c, now, task, [current_status(task)], None, True))
        return task

    def create(
        self, task: Task, message_key: str | None = None, supersedes: str | None = None
    ) -> Created:
        return self._create(task, message_key, supersedes)

    def create_held(
        self,
        task: Task,
        message_key: str | None,
        entry: Entry,
        fair: bool,
        outbox: OutboxMessage | None = None,
    ) -> Created:
        """`create`, and (only when it created the task) the task held in the
        turn book, in one transaction: a send's two writes as one. What the
        book took is kept for the task's `hold_and_take` that follows at once
        (`TakenByCreates`). No outbox: the broker is never this database."""
        if outbox is not None:
            outbox.unkept()
        taken: list[str] = []

        def hold(c: Any) -> None:
            taken[:] = self._book_in(c).hold_and_take([entry], fair)

        created = self._create(task, message_key, None, then=hold)
        if created.created:
            self._turns.creates.keep(task["id"], taken)
        return created

    def _create(
        self,
        task: Task,
        message_key: str | None,
        supersedes: str | None,
        then: Callable[[Any], None] | None = None,
    ) -> Created:
        """`create`; `then(connection)` inside its transaction, when it made the task."""
        require_safe_id(task.get("id"))

        def change(c: Any, now: float) -> Record | Created:
            made = self._log.create(Transaction(c, SQLITE), now, task, message_key, supersedes)
            if then is not None and isinstance(made, Record):
                then(c)
            return made

        done = self._change(change)
        return done if isinstance(done, Created) else Created(done.task, True)

    def read(self, task_id: str) -> Record | None:
        if not is_safe_id(task_id):
            return None
        now = self._clock()
        return self.database.snapshot(lambda c: read_one(Transaction(c, SQLITE), task_id, now))

    def commit(self, commit: Commit) -> bool:
        require_safe_id(commit.task.get("id"))
        return (
            self._change(
                lambda c, now: self._written(
                    c, now, commit.task, commit.events, commit.expected, commit.snapshot
                )
            )
            is not None
        )

    def claim(self, task_id: str, from_state: str, event: StatusUpdate) -> Outcome:
        if not is_safe_id(task_id):
            return Outcome(False, None)

        def change(c: Any, now: float) -> Record | Outcome | None:
            return self._log.claim(Transaction(c, SQLITE), now, task_id, from_state, event)

        done = self._change(change)
        return done if isinstance(done, Outcome) else Outcome(done is not None, done)

    def events(self, task_id: str, after: int, limit: int | None = None) -> list[tuple[int, Event]]:
        if not is_safe_id(task_id):
            return []
        now = self._clock()
        return self.database.snapshot(
            lambda c: logged(Transaction(c, SQLITE), task_id, after, now, limit)
        )

    def watch(self, task_id: str) -> AbstractContextManager[Waiter]:
        return self._poller.watch(task_id)

    # --- listing and the time indexes ---------------------------------------

    def all(self) -> dict[str, Task]:
        now = self._clock()

        records = self.database.snapshot(lambda c: read_all(Transaction(c, SQLITE), now))
        return {task_id: record.task for task_id, record in records.items()}

    def listing(self, query: Query) -> Listing:
        if query.as_of > self._listed():
            # Made known to the writes first: a status stamped at or before the
            # moment and saved after this is stamped just after it (`restamped`),
            # and the page, read later, sees every write that was not.
            self.database.write(lambda c: listed_as_of(Transaction(c, SQLITE), query.as_of))
        now = self._clock()
        return self.database.snapshot(lambda c: answer(Transaction(c, SQLITE), query, now))

    # --- upkeep ----------------------------------------------------------------

    def purge_expired(self) -> int:
        """Finished tasks past their time, with their logs, histories, message
        keys (on the row) and contexts no other task uses; up to 1,000 a run."""

        now = self._clock()
        purged = self.database.write(
            lambda c: self._log.purge(Transaction(c, SQLITE), now, _PURGE_BATCH)
        )
        self.documents.forget_expired()
        return purged

    def record_beat(self) -> None:
        self._set_time("reaper")

    def last_beat(self) -> float | None:
        rows = self.database.read("SELECT at FROM times WHERE name = 'reaper'")
        return float(rows[0][0]) if rows else None  # type: ignore[arg-type]

    def memory_use(self) -> None:
        return None  # on disk: no memory limit of its own

    def ping(self) -> None:
        """A small write: raises StoreError unless the database takes one now."""
        self._set_time("ready")

    def close(self) -> None:
        self.database.close()

    def turn_book(self) -> DocumentBook:
        return self._turns

    # --- internals -------------------------------------------------------------

    def _change(self, change: Callable[[Any, float], Any]) -> Any:
        """`change(connection, now)` in one write transaction, which also
        takes the task it wrote out of the turn book's flight when it left
        flight (one commit for both, and never one without the other); then
        the record wakes its watchers."""

        def write(c: Any) -> Any:
            done = change(c, self._clock())
            record = _record_of(done)
            if record is not None and state_of(record.task) not in IN_FLIGHT:
                self._book_in(c).leave(record.task["id"])
            return done

        done = self.database.write(write)
        record = _record_of(done)
        if record is not None:
            self._notifier.notify(record.task["id"], record.seq)
        return done

    def _written(
        self,
        c: Any,
        now: float,
        task: Task,
        events: Sequence[Event],
        expected: int | None,
        snapshot: bool,
    ) -> Record | None:
        """Inside a write: `TaskLog.write` on the connection's transaction."""
        return self._log.write(Transaction(c, SQLITE), now, task, events, expected, snapshot)

    def _book_in(self, c: Any) -> DocumentBook:
        """The turn book, stepped inside the write transaction begun on `c`."""
        return DocumentBook(SqlDocuments(InWrite(c), self._clock))

    def _after_a_boot(self, c: Any) -> None:
        """Inside the write that opens the store, when the machine went down
        since the database was last opened (a copy kept elsewhere, not synced
        as it is written, is mended here)."""

    def _opened(self, booted: float) -> None:
        """As the store opens, in one write: the counts of tasks written
        before counts were kept, and each task's next write starting a new
        lineage when the machine went down since the database was last
        opened and its transactions are not synced as they commit
        (`synchronous=NORMAL`: a power cut may have taken the last ones, and
        the numbers they handed out)."""

        def change(c: Any) -> None:
            row = c.execute("SELECT at FROM times WHERE name = 'boot'").fetchone()
            unsynced = c.execute("SELECT 1 FROM times WHERE name = 'unsynced'").fetchone()
            if row is None or row[0] != booted:
                # Any process that wrote unsynced since the last boot, this one included.
                if row is not None and (unsynced or not self._synced):
                    c.execute("UPDATE tasks SET lineage = 1")
                if row is not None:
                    self._after_a_boot(c)
                c.execute("INSERT OR REPLACE INTO times VALUES ('boot', ?)", (booted,))
                c.execute("DELETE FROM times WHERE name = 'unsynced'")
                unsynced = None
            if not self._synced and not unsynced:
                c.execute("INSERT INTO times VALUES ('unsynced', ?)", (booted,))
            tables.recount(c)

        self.database.write(change)

    def _listed(self) -> float:
        rows = self.database.read("SELECT at FROM times WHERE name = 'listed'")
        return float(rows[0][0]) if rows else 0.0  # type: ignore[arg-type]

    def _set_time(self, name: str) -> None:
        now = self._clock()
        self.database.write(
            lambda c: c.execute("INSERT OR REPLACE INTO times VALUES (?, ?)", (name, now))
        )

    def _stamp(self, task_id: str) -> int | None:
        """What changes with each write of the task: its last event number."""
        try:
            rows = self.database.read("SELECT seq FROM tasks WHERE id = ?", (task_id,))
        except StoreError:
            return None
        return int(rows[0][0]) if rows else 0  # type: ignore[call-overload]

    def _accepted(self, message_key: str) -> str | None:
        """The task a message made, while it is kept."""
        rows = self.database.read(
            f"SELECT id FROM tasks WHERE mkey = ? AND {_ALIVE}", (message_key, self._clock())
        )
        return str(rows[0][0]) if rows else None


def _record_of(done: object) -> Record | None:
    """The record a write made, if it made one."""
    record = done.record if isinstance(done, Outcome) and done.applied else done
    return record if isinstance(record, Record) else None


def sqlite_store(
    path: str | Path,
    *,
    terminal_ttl: float | None = None,
    fsync: bool = True,
    clock: Clock = time.time,
    log_limit: int = LOG_LIMIT,
    booted: float | None = None,
) -> SqliteStore:
    return SqliteStore(path, clock, terminal_ttl, fsync=fsync, log_limit=log_limit, booted=booted)
