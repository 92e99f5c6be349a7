"""SQLite: one database file on one host, shared by its processes.

Each write is one `BEGIN IMMEDIATE` transaction (`shared.stores.sqlite.database`):
the compare, the append, the listing columns, the time indexes, the log's
trim commit together, or not at all. A task is its row's document (as of
event `base`) with the events after it folded over it, read in one
statement (`shared.stores.sqlite.tables`). Other processes' writes are seen
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
from shared.codec import encode
from shared.errors import ContextTaken, StoreError
from shared.events import Event, StatusUpdate, context_of, current_status, fold
from shared.generation import stamped, withdrawn
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
from shared.store.listing import WINDOW, Listing, Query, restamped
from shared.store.time_indexes import TimeIndexed, TimeIndexes
from shared.store.wakeups import Notifier, Poller, Waiter
from shared.stores.sql.dialects import SQLITE
from shared.stores.sql.documents import SqlDocuments
from shared.stores.sql.indexes import SqlIndexes, place_in
from shared.stores.sql.runner import Transaction
from shared.stores.sqlite import tables
from shared.stores.sqlite.boot import booted_at
from shared.stores.sqlite.database import Database
from shared.stores.sqlite.listing import answer
from shared.stores.sqlite.runner import InWrite, SqliteRunner
from shared.task import IN_FLIGHT, Task, epoch, is_terminal, state_of
from shared.transitions import SNAPSHOT_EVERY

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
    ) -> None:
        """`fsync`: each transaction synced as it commits (`synchronous=FULL`);
        `booted`: when this machine booted (default: as Linux says)."""
        self.path = Path(path)
        self._clock = clock
        self._ttl = float(terminal_ttl) if terminal_ttl else 0.0
        self._log_limit = log_limit
        self.database = Database(self.path, self.SCHEMA, fsync=fsync)
        runner = SqliteRunner(self.database)
        self.documents = SqlDocuments(runner, clock)
        self.indexes = SqlIndexes(runner)
        self._times = TimeIndexes(self.indexes, clock)
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
        task_id = require_safe_id(task.get("id"))
        owner, context = task.get("owner", ""), task["contextId"]

        def change(c: Any, now: float) -> Record | Created:
            if message_key is not None:
                row = c.execute("SELECT id FROM tasks WHERE mkey = ?", (message_key,)).fetchone()
                if row is not None:
                    # Kept by a task still here (else let go: it expired, or is superseded).
                    earlier = tables.read_one(c, row[0], now) if row[0] != supersedes else None
                    if earlier is not None:
                        return Created(earlier.task, False)
                    c.execute("UPDATE tasks SET mkey = NULL WHERE mkey = ?", (message_key,))
            c.execute("INSERT OR IGNORE INTO contexts VALUES (?, ?)", (context, owner))
            taken = c.execute("SELECT owner FROM contexts WHERE context = ?", (context,)).fetchone()
            if taken[0] != owner:
                raise ContextTaken(f"context {context} belongs to another caller")
            record = self._written(c, now, task, [current_status(task)], None, True)
            c.execute("UPDATE tasks SET mkey = ? WHERE id = ?", (message_key, task_id))
            assert record is not None, "a write that compares nothing is made"
            if then is not None:
                then(c)
            return record

        done = self._change(change)
        return done if isinstance(done, Created) else Created(done.task, True)

    def read(self, task_id: str) -> Record | None:
        if not is_safe_id(task_id):
            return None
        return self.database.snapshot(lambda c: tables.read_one(c, task_id, self._clock()))

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
            found = tables.read_one(c, task_id, now)
            if found is None or state_of(found.task) != from_state:
                return Outcome(False, found)
            filled: StatusUpdate = {**event, "contextId": found.task.get("contextId", "")}
            (filled,) = stamped(found.task, [filled])
            snapshot = found.tail + 1 >= SNAPSHOT_EVERY
            proposed = fold(found.task, [filled])
            return self._written(c, now, proposed, [filled], found.seq, snapshot)

        done = self._change(change)
        return done if isinstance(done, Outcome) else Outcome(done is not None, done)

    def events(self, task_id: str, after: int, limit: int | None = None) -> list[tuple[int, Event]]:
        if not is_safe_id(task_id):
            return []
        rows = self.database.read(
            "SELECT e.seq, e.body FROM events e JOIN tasks t ON t.id = e.task_id"
            " WHERE e.task_id = ? AND e.seq > ? AND (t.expires IS NULL OR t.expires > ?)"
            " ORDER BY e.seq LIMIT ?",
            (task_id, after, self._clock(), -1 if limit is None else limit),
        )
        return tables.events_of(rows)

    def watch(self, task_id: str) -> AbstractContextManager[Waiter]:
        return self._poller.watch(task_id)

    # --- listing and the time indexes ---------------------------------------

    def all(self) -> dict[str, Task]:
        now = self._clock()

        def reads(c: Any) -> dict[str, Task]:
            rows = c.execute(
                tables.READ.format(ids=f"IN (SELECT id FROM tasks WHERE {_ALIVE})"), (now, now)
            ).fetchall()
            return {task_id: record.task for task_id, record in tables.records_of(rows).items()}

        return self.database.snapshot(reads)

    def listing(self, query: Query) -> Listing:
        if query.as_of > self._listed():
            # Made known to the writes first: a status stamped at or before the
            # moment and saved after this is stamped just after it (`restamped`),
            # and the page, read later, sees every write that was not.
            self.database.write(
                lambda c: c.execute(
                    "INSERT INTO times VALUES ('listed', ?)"
                    " ON CONFLICT (name) DO UPDATE SET at = max(at, excluded.at)",
                    (query.as_of,),
                )
            )
        return self.database.snapshot(lambda c: answer(c, query, self._clock()))

    # --- upkeep ----------------------------------------------------------------

    def purge_expired(self) -> int:
        """Finished tasks past their time, with their logs, histories, message
        keys (on the row) and contexts no other task uses; up to 1,000 a run."""

        def change(c: Any) -> int:
            gone = c.execute(
                "SELECT id, context, owner FROM tasks WHERE expires <= ? ORDER BY expires LIMIT ?",
                (self._clock(), _PURGE_BATCH),
            ).fetchall()
            _forget(c, [task_id for task_id, _, _ in gone])
            self._purged(c, [task_id for task_id, _, _ in gone])
            c.executemany(
                "DELETE FROM contexts WHERE context = ? AND owner = ? AND NOT EXISTS"
                " (SELECT 1 FROM tasks WHERE context = ? AND owner = ?)",
                [(context, owner, context, owner) for _, context, owner in gone],
            )
            return len(gone)

        purged = self.database.write(change)
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
        """Inside a write: `events` appended to the task if its last event is
        still `expected` (None: whatever it is, or a new task), the task
        written whole when `snapshot`; the task as it then stands, or None."""
        task_id = task["id"]
        # The row, and the latest moment a listing read as of, in one statement.
        *found, moment = c.execute(
            "SELECT t.seq, t.base, t.lineage, t.expires, m.at FROM (SELECT 1)"
            " LEFT JOIN tasks t ON t.id = ? LEFT JOIN times m ON m.name = 'listed'",
            (task_id,),
        ).fetchone()
        row = found if found[0] is not None else None
        if row is not None and row[3] is not None and row[3] <= now:
            _forget(c, [task_id])  # finished and past its time: gone, and written afresh
            row = None
        if expected is not None and (row is None or row[0] != expected):
            return None
        saved, task = restamped(events, task, moment or 0.0)
        seq, base = (int(row[0]), int(row[1])) if row else (0, 0)
        snapshot = snapshot or (row is not None and self._copy_differs(c, task_id))
        if row is not None and row[2]:
            # A new lineage: numbers the lost transactions may have handed out are never reused.
            seq = max(seq, int(now * 1_000_000))
            task, saved = withdrawn(task, saved)
            snapshot = True  # nothing before the new base to fold the task from
        moved = False
        for event in saved:
            seq += 1
            c.execute("INSERT INTO events VALUES (?, ?, ?)", (task_id, seq, encode(event)))
            if event["kind"] == "status-update":
                status = event["status"]
                c.execute(
                    "INSERT INTO history VALUES (?, ?, ?, ?)",
                    (task_id, seq, epoch(status.get("timestamp", "")), status["state"]),
                )
                moved = True
        state, ts = state_of(task), epoch(task["status"].get("timestamp", ""))
        expires = now + self._ttl if self._ttl and is_terminal(state) else None
        if row is None:
            c.execute(
                "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, 0)",
                (task_id, encode(task), seq, seq, state, ts, task.get("owner", ""),
                 context_of(task), expires),
            )  # fmt: skip
            base = seq
            self._wrote_whole(c, task)
        elif snapshot:
            c.execute(
                "UPDATE tasks SET doc = ?, seq = ?, base = ?, state = ?, ts = ?, expires = ?,"
                " lineage = 0 WHERE id = ?",
                (encode(task), seq, seq, state, ts, expires, task_id),
            )
            base = seq
            self._wrote_whole(c, task)
        else:
            c.execute(
                "UPDATE tasks SET seq = ?, state = ?, ts = ?, expires = ? WHERE id = ?",
                (seq, state, ts, expires, task_id),
            )
        trimmed = min(base, seq - self._log_limit)  # events numbered up to this go
        if trimmed > 0:
            c.execute("DELETE FROM events WHERE task_id = ? AND seq <= ?", (task_id, trimmed))
        if moved:
            # The last change before the listing window is where the task stood when it began.
            c.execute(
                "DELETE FROM history WHERE task_id = ? AND seq < (SELECT max(seq) FROM history"
                " WHERE task_id = ? AND ts < ?)",
                (task_id, task_id, now - WINDOW),
            )
            place_in(Transaction(c, SQLITE), task_id, self._times.scores(state))
        return Record(task, seq, seq - base)

    def _book_in(self, c: Any) -> DocumentBook:
        """The turn book, stepped inside the write transaction begun on `c`."""
        return DocumentBook(SqlDocuments(InWrite(c), self._clock))

    def _wrote_whole(self, c: Any, task: Task) -> None:
        """Inside the write that stored the task whole (a store that keeps a
        copy of it elsewhere writes that copy here)."""

    def _copy_differs(self, c: Any, task_id: str) -> bool:
        """Inside a write: whether the copy `_wrote_whole` keeps is not the one
        it last wrote (then this write writes the task whole)."""
        return False

    def _purged(self, c: Any, task_ids: list[str]) -> None:
        """Inside the purge that forgot these tasks."""

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


def _forget(c: Any, task_ids: list[str]) -> None:
    """The tasks gone, with their logs and histories (inside a write)."""
    for table, column in (("tasks", "id"), ("events", "task_id"), ("history", "task_id")):
        c.executemany(f"DELETE FROM {table} WHERE {column} = ?", [(i,) for i in task_ids])


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
