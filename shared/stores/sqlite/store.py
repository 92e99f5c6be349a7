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
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

from shared.broker.outbox import OutboxMessage
from shared.errors import StoreError
from shared.owners.book import DocumentBook, Entry
from shared.push.contract import Once
from shared.store.contract import LOG_LIMIT, Created, Record
from shared.store.time_indexes import TimeIndexes
from shared.store.wakeups import Notifier, Poller, Waiter
from shared.stores.sql.dialects import SQLITE
from shared.stores.sql.documents import SqlDocuments
from shared.stores.sql.indexes import SqlIndexes
from shared.stores.sql.runner import Transaction
from shared.stores.sql.store import SqlStore
from shared.stores.sql.tasks import Copy, TaskLog
from shared.stores.sqlite import tables
from shared.stores.sqlite.boot import booted_at
from shared.stores.sqlite.database import Database
from shared.stores.sqlite.runner import SqliteRunner
from shared.task import Task

R = TypeVar("R")
Clock = Callable[[], float]
_POLL = 0.05  # how often watched tasks are read for other processes' writes, seconds


class SqliteStore(SqlStore):
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

        def hold(t: Transaction) -> None:
            taken[:] = self._book_in(t).hold_and_take([entry], fair)

        created = self._create(task, message_key, None, then=hold)
        if created.created:
            self._turns.creates.keep(task["id"], taken)
        return created

    def watch(self, task_id: str) -> AbstractContextManager[Waiter]:
        return self._poller.watch(task_id)

    def memory_use(self) -> None:
        return None  # on disk: no memory limit of its own

    def ping(self) -> None:
        """A small write: raises StoreError unless the database takes one now."""
        self._set_time("ready")

    def close(self) -> None:
        self.database.close()

    # --- the database ------------------------------------------------------------

    def _writing(self, work: Callable[[Transaction], R]) -> R:
        return self.database.write(lambda c: work(Transaction(c, SQLITE)))

    def _reading(self, work: Callable[[Transaction], R]) -> R:
        return self.database.snapshot(lambda c: work(Transaction(c, SQLITE)))

    def _committed(self, record: Record) -> None:
        self._notifier.notify(record.task["id"], record.seq)

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

    def _stamp(self, task_id: str) -> int | None:
        """What changes with each write of the task: its last event number."""
        try:
            rows = self.database.read("SELECT seq FROM tasks WHERE id = ?", (task_id,))
        except StoreError:
            return None
        return int(rows[0][0]) if rows else 0  # type: ignore[call-overload]


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
