"""A store whose task log is the shared SQL (`shared.stores.sql.tasks`): the
store contract written once over it, for the SQLite, file and PostgreSQL
stores. A database supplies how a write transaction and a read are begun,
and what follows a write (a notification, a wake-up of this process's
waiters); every feature comes from the modules written once over the
small documents and scored indexes."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, TypeVar

from shared.events import Event, StatusUpdate, current_status
from shared.owners.book import DocumentBook
from shared.store.contract import Commit, Created, Outcome, Record, is_safe_id, require_safe_id
from shared.store.features import DocumentFeatures
from shared.store.listing import Listing, Query
from shared.store.time_indexes import TimeIndexed, TimeIndexes
from shared.stores.sql.documents import SqlDocuments
from shared.stores.sql.indexes import SqlIndexes
from shared.stores.sql.listing import answer
from shared.stores.sql.runner import Inside, Transaction
from shared.stores.sql.tasks import ALIVE, TaskLog, listed_as_of, read_all, read_one
from shared.stores.sql.tasks import events as logged
from shared.task import IN_FLIGHT, Task, state_of

R = TypeVar("R")
Change = Callable[[Transaction, float], Any]
PURGE_BATCH = 1000


class SqlStore(TimeIndexed, DocumentFeatures, ABC):
    documents: SqlDocuments
    indexes: SqlIndexes
    lists_by_scan = False  # ListTasks reads the page from the listing indexes
    _clock: Callable[[], float]
    _log: TaskLog
    _times: TimeIndexes
    _turns: DocumentBook

    # --- what a database supplies --------------------------------------------

    @abstractmethod
    def _writing(self, work: Callable[[Transaction], R]) -> R:
        """`work` in one write transaction, committed when it returns."""

    @abstractmethod
    def _reading(self, work: Callable[[Transaction], R]) -> R:
        """`work`'s reads, each statement as of one moment at least."""

    def _snapshot(self, work: Callable[[Transaction], R]) -> R:
        """`work`'s reads, every statement as of one moment."""
        return self._reading(work)

    def _wrote(self, t: Transaction, record: Record) -> None:
        """Inside the write that made `record`, last."""

    def _committed(self, record: Record) -> None:
        """After the write that made `record` committed."""

    # --- the contract ----------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        record = self.read(task_id)
        return record.task if record is not None else None

    def save(self, task: Task) -> Task:
        require_safe_id(task.get("id"))
        events = [current_status(task)]
        self._change(lambda t, now: self._log.write(t, now, task, events, None, True))
        return task

    def create(
        self, task: Task, message_key: str | None = None, supersedes: str | None = None
    ) -> Created:
        return self._create(task, message_key, supersedes)

    def read(self, task_id: str) -> Record | None:
        if not is_safe_id(task_id):
            return None
        now = self._clock()
        return self._reading(lambda t: read_one(t, task_id, now))

    def commit(self, commit: Commit) -> bool:
        require_safe_id(commit.task.get("id"))

        def change(t: Transaction, now: float) -> Record | None:
            return self._log.write(
                t, now, commit.task, commit.events, commit.expected, commit.snapshot
            )

        return self._change(change) is not None

    def claim(self, task_id: str, from_state: str, event: StatusUpdate) -> Outcome | None:
        if not is_safe_id(task_id):
            return Outcome(False, None)
        done = self._change(lambda t, now: self._log.claim(t, now, task_id, from_state, event))
        return done if isinstance(done, Outcome) or done is None else Outcome(True, done)

    def events(self, task_id: str, after: int, limit: int | None = None) -> list[tuple[int, Event]]:
        if not is_safe_id(task_id):
            return []
        now = self._clock()
        return self._reading(lambda t: logged(t, task_id, after, now, limit))

    def all(self) -> dict[str, Task]:
        now = self._clock()
        records = self._snapshot(lambda t: read_all(t, now))
        return {task_id: record.task for task_id, record in records.items()}

    def listing(self, query: Query) -> Listing:
        if query.as_of > self._time("listed"):
            # Made known to the writes first: a status stamped at or before the
            # moment and saved after this is stamped just after it (`restamped`),
            # and the page, read later, sees every write that was not.
            self._writing(lambda t: listed_as_of(t, query.as_of))
        now = self._clock()
        return self._snapshot(lambda t: answer(t, query, now))

    def purge_expired(self) -> int:
        """Finished tasks past their time, with their logs, histories, message
        keys and contexts no other task uses; up to 1,000 a run."""
        now = self._clock()
        purged = self._writing(lambda t: self._log.purge(t, now, PURGE_BATCH))
        self.documents.forget_expired()
        return purged

    def record_beat(self) -> None:
        self._set_time("reaper")

    def last_beat(self) -> float | None:
        at = self._time("reaper")
        return at or None

    def turn_book(self) -> DocumentBook:
        return self._turns

    # --- within -------------------------------------------------------------

    def _create(
        self,
        task: Task,
        message_key: str | None,
        supersedes: str | None,
        then: Callable[[Transaction], None] | None = None,
    ) -> Created:
        """`create`; `then(t)` inside its transaction, when it made the task."""
        require_safe_id(task.get("id"))

        def change(t: Transaction, now: float) -> Record | Created:
            made = self._log.create(t, now, task, message_key, supersedes)
            if then is not None and isinstance(made, Record):
                then(t)
            return made

        done = self._change(change)
        return done if isinstance(done, Created) else Created(done.task, True)

    def _change(self, change: Change) -> Any:
        """`change(t, now)` in one write transaction, which also takes the task
        it wrote out of the turn book's flight when it left flight (one commit
        for both, and never one without the other); then the record's
        watchers are woken."""

        def write(t: Transaction) -> Any:
            done = change(t, self._clock())
            record = _record_of(done)
            if record is not None:
                if state_of(record.task) not in IN_FLIGHT:
                    self._book_in(t).leave(record.task["id"])
                self._wrote(t, record)
            return done

        done = self._writing(write)
        record = _record_of(done)
        if record is not None:
            self._committed(record)
        return done

    def _book_in(self, t: Transaction) -> DocumentBook:
        """The turn book, stepped inside the write transaction `t`."""
        return DocumentBook(SqlDocuments(Inside(t), self._clock))

    def _time(self, name: str) -> float:
        row = self._reading(
            lambda t: t.one("SELECT at FROM times WHERE name = :name", {"name": name})
        )
        return float(row[0]) if row else 0.0

    def _set_time(self, name: str) -> None:
        params = {"name": name, "at": self._clock()}
        self._writing(
            lambda t: t.send(
                "INSERT INTO times (name, at) VALUES (:name, :at)"
                " ON CONFLICT (name) DO UPDATE SET at = excluded.at",
                params,
            )
        )

    def _accepted(self, message_key: str) -> str | None:
        """The task a message made, while it is kept."""
        params = {"key": message_key, "now": self._clock()}
        row = self._reading(
            lambda t: t.one(f"SELECT id FROM tasks WHERE mkey = :key AND {ALIVE}", params)
        )
        return str(row[0]) if row else None


def _record_of(done: object) -> Record | None:
    """The record a write made, if it made one."""
    record = done.record if isinstance(done, Outcome) and done.applied else done
    return record if isinstance(record, Record) else None
