"""A directory of `<id>.json` files: durable, greppable, shareable.

Layout under the directory:
  <id>.json          the task itself, pretty-printed, replaced atomically:
                     `jq .status.state tasks/*.json` reads every state
  .log/<id>.jsonl    the task's events, one {"seq": n, "event": {...}} a
                     line, and a marker {"seq": n, "snapshot": {...}} per
                     task file written, naming its content: a read folds
                     the events after the marker of the file it found
                     (see `shared.stores.file.log`)
  .messages/<hash>   the id of the task a message created (idempotent sends)
  .contexts/<hash>   the owner of a context
  .locks/<n>         64 lock files striped by id, for compare-and-append
                     across processes (flock), without a lock file per task
  .expires/<id>      for a finished task when a time to live is set: its
                     mtime is the moment it expires (the reaper purges it)
  .beat              touched by each run of the reaper
  .store.db          a SQLite database (`shared.stores.sqlite`): small
                     documents (the turn book, each owner's send limits,
                     each task's push state) and scored indexes: the time
                     indexes the heartbeat and the reaper read
                     (`shared.store.time_indexes`: working, waiting,
                     interrupted), the tasks whose webhooks are swept
  .listing/          where each task sits in ListTasks' order, one shared log
                     of positions (`shared.stores.file.positions`): a write
                     that moves a task appends its line, under the task's
                     lock, before it writes the task; a listing reads the
                     page from an index each process keeps from that log
                     (`shared.stores.file.listing`)

A write of the whole task writes a temporary file, appends the change's
events with the new file's marker, then renames the file into place, so
whichever file a reader finds, its marker is already in the log: readers
take no lock and never fold an event twice. A task file no marker names (an
older wrapper `{"seq": N, "task": ...}` file, a file written by hand or by
the seed's store, one left by a power cut between its rename and its
marker, or a log cut short) is adopted under the task's lock: a wrapper is
read at its own number and rewritten bare; any other file is the task as
it stands, and its status goes into the log as the next event.

Several processes on one host (or one shared volume with working flock)
see each other's tasks and serialise their writes on the stripe locks.
No file is ever opened through a symbolic link: a planted link reads as a
missing task (and is logged), and no write follows one out of the directory.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, cast

from shared.codec import decode
from shared.documents import ABSENT
from shared.errors import ContextTaken, StoreError
from shared.events import Event, StatusUpdate, current_status, fold
from shared.generation import withdrawn
from shared.keys import digest
from shared.owners.book import DocumentBook
from shared.owners.ledger import DocumentLedger
from shared.push.contract import Once, PushStore
from shared.push.documents import DocumentPush
from shared.store.contract import (
    LOG_LIMIT,
    Commit,
    Created,
    Outcome,
    Record,
    is_safe_id,
    message_key,
    require_safe_id,
)
from shared.store.listing import (
    Listing,
    Query,
    StatusHistory,
    history_of,
    restamped,
)
from shared.store.spec import ALWAYS
from shared.store.time_indexes import (
    INTERRUPTED_INDEX,
    STATES,
    WAITING_INDEX,
    WORKING_INDEX,
    TimeIndexes,
)
from shared.store.wakeups import Notifier, Poller, Waiter
from shared.stores.file.boot import booted_at
from shared.stores.file.documents_upgrade import take_over as take_over_documents
from shared.stores.file.documents_upgrade import take_over_markers
from shared.stores.file.listing import FileListing
from shared.stores.file.locking import WITHIN, flock_within, unlock
from shared.stores.file.log import Durability, LogFiles, Marker, open_no_link
from shared.stores.file.moment import ListingMoment
from shared.stores.file.positions import PositionLog, gone, placed
from shared.stores.file.push_upgrade import take_over as take_over_push
from shared.stores.sqlite.database import Database
from shared.stores.sqlite.documents import SCHEMA as DOCUMENTS_SCHEMA
from shared.stores.sqlite.documents import SqliteDocuments
from shared.stores.sqlite.indexes import SCHEMA as INDEXES_SCHEMA
from shared.stores.sqlite.indexes import SqliteIndexes
from shared.task import (
    IN_FLIGHT,
    SUBMITTED,
    Task,
    is_terminal,
    state_of,
)
from shared.transitions import claim_by_commit

log = logging.getLogger(__name__)

Clock = Callable[[], float]
_STRIPES = 64
# The SQLite database inside the directory (`shared.stores.sqlite`).
DATABASE = ".store.db"
_POLL = 0.05  # how often watched logs are checked for growth, seconds
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class FileStore:
    lists_by_scan = False  # ListTasks reads the page from an index of positions

    def __init__(
        self,
        directory: str | os.PathLike[str],
        clock: Clock = time.time,
        terminal_ttl: float | None = None,
        fsync: str = ALWAYS,
        log_limit: int = LOG_LIMIT,
        booted: float | None = None,
    ) -> None:
        """`booted`: when this machine booted (default: as Linux says, see
        `shared.stores.file.boot`); a task last written before it may have lost events."""
        self.directory = Path(directory)
        self._booted = booted_at() if booted is None else booted
        self._durability = Durability(fsync)
        self._clock = clock
        self._ttl = terminal_ttl
        self._expires = self.directory / ".expires"
        self._log = self.directory / ".log"
        # Small documents (shared.documents) and scored indexes (shared.indexes),
        # under the features that keep state, in one SQLite database.
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.database = Database(
            self.directory / DATABASE,
            (*DOCUMENTS_SCHEMA, *INDEXES_SCHEMA),
            fsync=self._durability.inline,
            within=WITHIN,
        )
        self.documents = SqliteDocuments(self.database, clock)
        self.indexes = SqliteIndexes(self.database)
        self._times = TimeIndexes(self.indexes, clock)
        self._messages = self.directory / ".messages"
        self._contexts = self.directory / ".contexts"
        self._locks = self.directory / ".locks"
        self._places = self.directory / ".listing"
        folders = (
            self._log,
            self._messages,
            self._contexts,
            self._expires,
            self._places,
        )
        for folder in (self.directory, *folders, self._locks):
            # Only this service's user reads or writes what the store creates.
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            if folder.is_symlink():
                raise StoreError(f"task store: {folder} is a symbolic link; refusing to use it")
        for suffix in ("", "-wal", "-shm"):
            if (self.directory / f"{DATABASE}{suffix}").is_symlink():
                raise StoreError(f"task store: {DATABASE}{suffix} is a symbolic link; refusing it")
        self._logs = LogFiles(self._log, self._durability, log_limit)
        self._moment = ListingMoment(self._locks)
        self._positions = PositionLog(self._places, self._durability)
        self._listing = FileListing(
            self._positions,
            read=self.get,
            repair=self._repair_position,
            stored=self._stored_ids,
            clock=self._clock,
            recheck=self._positions_may_lag,
        )
        self._notifier = Notifier()
        self._push = Once()
        self._turns = DocumentBook(self.documents)
        take_over_documents(self.directory, self.database, clock)
        take_over_markers(self.directory, self.database)
        self._take_over_the_turn_book()
        self._poller = Poller(
            self._notifier, self._log_stamp, every=_POLL, name="toolnexus-file-events"
        )

    def _take_over_the_turn_book(self) -> None:
        """A turn book kept by an earlier version in `.turns/book.json` becomes
        the store's document, once (what it held keeps its turn)."""
        earlier = self.directory / ".turns" / "book.json"
        raw = _read_text(earlier)
        if raw is None:
            return
        try:
            state = json.loads(raw)
        except ValueError:
            state = None
        if isinstance(state, dict):
            self.documents.swap(DocumentBook.NAME, ABSENT, state)  # taken already: kept
        earlier.unlink(missing_ok=True)

    # --- the contract ------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        record = self.read(task_id)
        return record.task if record is not None else None

    def save(self, task: Task) -> Task:
        task_id = require_safe_id(task.get("id"))
        with self._locked(task_id), self._moment.pinned() as moment:
            (event,), saved = restamped([current_status(task)], task, moment)
            current = self._read(task_id, locked=True)
            last = current.seq if current is not None else self._logs.last(task_id)
            first, fresh = self._next(task_id, last)
            if fresh and current is not None:
                saved, (event,) = withdrawn(saved, [event])
            if current is None or not placed(task_id, current.task).same_place(
                placed(task_id, saved)
            ):
                self._place(task_id, saved)
            self._waiting_first(task_id, state_of(task))
            self._write(task_id, first, fresh, [event], saved)
            self._indexed(task_id, state_of(task))
        return task

    # --- EventStore ----------------------------------------------------------

    def create(
        self, task: Task, message_key: str | None = None, supersedes: str | None = None
    ) -> Created:
        task_id = require_safe_id(task.get("id"))
        record_path = self._messages / message_key if message_key else None
        # Both stripes at once, in order: taken one inside the other they could
        # be the same stripe (flock then waits on itself) or be taken in the
        # opposite order by another create (each waits on the other).
        with self._locked(message_key or task_id, task_id), self._moment.pinned() as moment:
            if record_path is not None and (earlier := _read_text(record_path)):
                found = self.get(earlier) if is_safe_id(earlier) else None
                if found is not None and earlier != supersedes:
                    return Created(found, False)
            self._claim_context(task["contextId"], task.get("owner", ""))
            if record_path is not None:
                # The record first: a crash before the task is written leaves a
                # record of nothing, which a retry overwrites; never two tasks.
                _write_atomically(record_path, task_id.encode())
            # The waiting marker before the task too (`_waiting_first`).
            self._waiting_first(task_id, SUBMITTED)
            events, saved = restamped([current_status(task)], task, moment)
            self._place(task_id, saved)
            self._write(task_id, 1, False, events, saved)
            # Placed already: a new task is in the waiting index alone, since before the write.
            self._indexed(task_id, SUBMITTED, moved=False)
        return Created(saved, True)

    def read(self, task_id: str) -> Record | None:
        if not is_safe_id(task_id):
            return None
        return self._read(task_id)

    def commit(self, commit: Commit) -> bool:
        task_id = require_safe_id(commit.task.get("id"))
        with self._locked(task_id), self._moment.pinned() as moment:
            if self._seq(task_id) != commit.expected:
                return False
            events, task = restamped(commit.events, commit.task, moment)
            first, fresh = self._next(task_id, commit.expected)
            if fresh:
                task, events = withdrawn(task, events)
            # A new lineage starts with the task written whole: its log holds
            # nothing else to fold the task from.
            whole = task if commit.snapshot or fresh else None
            moved = any(event["kind"] == "status-update" for event in events)
            if moved:
                self._place(task_id, task)
            self._waiting_first(task_id, state_of(commit.task))
            self._write(task_id, first, fresh, events, whole)
            self._indexed(task_id, state_of(commit.task), moved=moved)
            return True

    def events(self, task_id: str, after: int, limit: int | None = None) -> list[tuple[int, Event]]:
        if not is_safe_id(task_id):
            return []
        return self._logs.tail(task_id, after)[:limit]

    def claim(self, task_id: str, from_state: str, event: StatusUpdate) -> Outcome:
        return claim_by_commit(self, task_id, from_state, event)

    def watch(self, task_id: str) -> AbstractContextManager[Waiter]:
        return self._poller.watch(task_id)

    # --- listing and the time indexes ---------------------------------------

    def all(self) -> dict[str, Task]:
        tasks = {}
        for path in self.directory.glob("*.json"):
            task = self.get(path.stem) if is_safe_id(path.stem) else None
            if task is not None:
                tasks[path.stem] = task
        return tasks

    def listing(self, query: Query) -> Listing:
        # Every write in flight finishes first (and with it, its position).
        self._moment.raise_to(query.as_of)
        return self._listing.answer(query, self._statuses)

    def _statuses(self, task_id: str) -> StatusHistory:
        return history_of(self.events(task_id, 0))

    def heartbeat(self, *task_ids: str) -> None:
        self._times.heartbeat(*filter(is_safe_id, task_ids))

    def stale(self, cutoff: float) -> list[str]:
        return self._due(WORKING_INDEX, cutoff)

    def waiting(self, cutoff: float) -> list[str]:
        return self._due(WAITING_INDEX, cutoff)

    def interrupted(self, cutoff: float) -> list[str]:
        return self._due(INTERRUPTED_INDEX, cutoff)

    def _due(self, index: str, cutoff: float) -> list[str]:
        """The tasks the time index `index` names as due, each checked
        against its log. A write is logged first and its index placed after;
        a writer killed between the two leaves the task in the index of the
        state before (a claimed task still waiting: never reaped, re-sent for
        ever). Such a task is placed again here, under its lock, from the
        state the log holds."""
        states = STATES[index]
        due = []
        for task_id in self._times.due(index, cutoff):
            record = self.read(task_id)
            if record is None and index == WAITING_INDEX and self._never_written(task_id):
                continue  # a creator killed before it wrote the task: no task, not waiting
            if record is None or state_of(record.task) in states:
                due.append(task_id)  # (gone: its reader says so, as before)
                continue
            with self._locked(task_id):
                record = self._read(task_id, locked=True)
                # (A writer that held the lock meanwhile has placed the task itself.)
                left = self._times.score(index, task_id) is not None
                if left and record is not None and state_of(record.task) not in states:
                    log.warning(
                        "task store: task %s is %s but was still indexed as before its last"
                        " write (a writer stopped between the two): placed again",
                        task_id,
                        state_of(record.task),
                    )
                    self._indexed(task_id, state_of(record.task))
        return due

    def _never_written(self, task_id: str) -> bool:
        """No file of the task at all (under its lock, so not a create in
        progress): it leaves the waiting index, if still there."""
        with self._locked(task_id):
            if os.path.lexists(self._task_file(task_id)) or os.path.lexists(
                self._logs.path(task_id)
            ):
                return False
            self.indexes.remove(WAITING_INDEX, task_id)
            return True

    def resent(self, task_id: str) -> None:
        if is_safe_id(task_id):
            self._times.resent(task_id)

    def record_beat(self) -> None:
        _write_atomically(self.directory / ".beat", repr(self._clock()).encode())

    def last_beat(self) -> float | None:
        text = _read_text(self.directory / ".beat")
        try:
            return float(text) if text else None
        except ValueError:
            return None

    def memory_use(self) -> None:
        return None  # on disk: no memory limit of its own

    def close(self) -> None:
        self.database.close()  # every other file is closed after each call

    def push_store(self, ttl: float | None = None) -> PushStore:
        return self._push.get(
            lambda: DocumentPush(
                self.documents,
                self.indexes,
                ttl,
                upgrade=lambda push: take_over_push(self.directory, push),
            )
        )

    def send_ledger(self) -> DocumentLedger:
        return DocumentLedger(self.documents, self._accepted)

    def _accepted(self, message_key: str) -> str | None:
        """The task a message made, while it is kept."""
        task_id = _read_text(self._messages / message_key)
        return task_id if task_id and self.read(task_id) is not None else None

    def turn_book(self) -> DocumentBook:
        return self._turns

    def ping(self) -> None:
        """Raise StoreError unless the directory is there and writable."""
        probe = self.directory / f".ping.{os.getpid()}.{threading.get_ident()}"
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, 0o600)
            os.close(fd)
            os.unlink(probe)
        except OSError as error:
            raise StoreError(
                f"task store unavailable: {self.directory}: {error.strerror}",
                f"the task directory is not writable ({error.strerror})",
            ) from None

    # --- reading and writing under the stripe lock --------------------------

    def _read(self, task_id: str, *, locked: bool = False) -> Record | None:
        """The task file with the events after the one its marker names
        folded over it; a file no marker names is read under the lock and
        adopted (see the module docstring). `locked`: the caller holds the
        task's lock."""
        if self._expired(task_id):
            return None  # finished and past its time to live: the reaper purges it
        found = _read_task_file(self._task_file(task_id))
        if found is None:
            return None
        raw, stored, info = found
        if not _is_wrapper(stored):
            digest_of = _content_digest(raw)
            scan = self._logs.scan(task_id, digest_of)
            if scan.base is not None:
                if locked and not scan.latest and not self._written_before_boot(task_id):
                    # The newest marker names this file again, so a change
                    # under the lock finds it with one stat. (Not in a log
                    # from before this boot: the write would hide its age
                    # from the change that must number on from a new base.)
                    marker = Marker(scan.base, digest_of, _identity(info))
                    self._logs.append(task_id, 0, [], marker)
                return _record(cast(Task, stored), scan.base, scan.events)
        if locked:
            return self._adopt(task_id, found, write=True)
        try:
            with self._locked(task_id):
                return self._read(task_id, locked=True)
        except (StoreError, OSError) as error:
            # No lock or no write (a planted link, a read-only or full disk):
            # the read is still served, and the adoption waits for a write.
            log.warning("task store: reading task %s without adopting it: %s", task_id, error)
            return self._adopt(task_id, found, write=False)

    def _adopt(
        self, task_id: str, found: tuple[bytes, dict[str, Any], os.stat_result], *, write: bool
    ) -> Record:
        """A task file no marker names, made the log's (with `write`). An
        older wrapper file holds its own event number and is rewritten as the
        bare task. Any other file (a crash after its rename, before its
        marker reached the disk; the log cut short; a hand edit) is the task
        as it stands: its status goes in as the next event, so a follower
        sees where it stands, with a marker naming the file."""
        raw, stored, info = found
        last = self._logs.last(task_id)
        if _is_wrapper(stored):
            base, task = stored["seq"], cast(Task, stored["task"])
            if write:
                lost = [current_status(task)] if last < base else []  # the log was cut short
                self._write(task_id, base, False, lost, task, seq=base)
            record = _record(task, base, self._logs.tail(task_id, base))
            if write:
                self._place(task_id, record.task)
            return record
        task = cast(Task, stored)
        if not write:
            return Record(task, last, 0)
        log.warning("task store: adopting task file %s (no log marker names it)", task_id)
        seq, fresh = self._next(task_id, last)
        self._place(task_id, task)
        marker = Marker(seq, _content_digest(raw), _identity(info))
        if fresh:
            self._logs.restart(task_id, seq, [current_status(task)], marker)
        else:
            self._logs.append(task_id, seq, [current_status(task)], marker)
        self._notifier.notify(task_id)
        return Record(task, seq, 0)

    def _expired(self, task_id: str) -> bool:
        return bool(self._ttl) and _mtime_of(self._expires / task_id) <= self._clock()

    def _seq(self, task_id: str) -> int | None:
        """The number of the task's last event, without reading the task
        (under its lock): the newest marker names the task file it was
        written with, so a stat tells whether it still is the file there,
        and the log's last line holds the rest. A change then costs the
        same for a tiny task and a huge one."""
        if self._expired(task_id):
            return None
        try:
            info = os.stat(self._task_file(task_id), follow_symlinks=False)
        except OSError:
            return None
        marker, last = self._logs.latest(task_id)
        if marker is not None and marker.file == _identity(info):
            return max(marker.seq, last)
        record = self._read(task_id, locked=True)  # no marker for this file: adopt it
        return record.seq if record is not None else None

    def _task_file(self, task_id: str) -> Path:
        return self.directory / f"{task_id}.json"

    def _next(self, task_id: str, last: int) -> tuple[int, bool]:
        """The number of the event after `last`, and whether it starts a new
        lineage. A task whose files were last written before this machine
        booted may have lost the tail of its log in the power cut (under
        `everysec` or `no`; even under `always`, a follower may have read an
        append before its fsync ended), and with it numbers readers have
        seen: it numbers on from the clock in microseconds instead, above any
        number those writes could have used (as the Redis store does after a
        restart, see docs/event-log.md)."""
        if not self._written_before_boot(task_id):
            return last + 1, False
        first = max(last + 1, time.time_ns() // 1000)
        log.info(
            "task store: task %s last written before this boot: numbering on from %d",
            task_id,
            first,
        )
        return first, True

    def _written_before_boot(self, task_id: str) -> bool:
        for path in (self._logs.path(task_id), self._task_file(task_id)):
            try:
                return os.stat(path, follow_symlinks=False).st_mtime < self._booted
            except OSError:
                continue  # no log (lost, or never written): the task file says
        return False  # a new task

    def _write(
        self,
        task_id: str,
        first: int,
        fresh: bool,
        events: Sequence[Event],
        whole: Task | None,
        seq: int | None = None,
    ) -> None:
        """Append `events` numbered `first` on (`fresh`: as the log's only
        lines, a new lineage; then `whole` is required); with `whole`, write
        it as the task file including the events up to `seq` (default: the
        last one): a temporary file, then its marker logged with the events,
        then the rename. Whichever file a reader then finds, its marker is
        logged."""
        if whole is None:
            self._logs.append(task_id, first, events, None)
            return
        path = self._task_file(task_id)
        data = json.dumps(whole, indent=2, ensure_ascii=False).encode() + b"\n"
        temp, info = _temporary(path, data, fsync=self._durability.files_synced)
        try:
            new = not os.path.lexists(path)
            last = first + len(events) - 1 if seq is None else seq
            marker = Marker(last, _content_digest(data), _identity(info))
            if fresh:
                self._logs.restart(task_id, first, events, marker)
            else:
                self._logs.append(task_id, first, events, marker)
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        if new:
            self._durability.created(path)

    def _waiting_first(self, task_id: str, state: str) -> None:
        """A write that leaves the task `submitted` (a create, a follow-up)
        puts it in the waiting index before it writes. Put there after, a
        writer killed between the two would leave a submitted task no
        re-sender finds (a follow-up was indexed only as interrupted, which
        the reaper reads once the input timeout has passed, never without
        one), and a retry of the message, which finds the task or the reply
        applied, queues nothing. An entry of a write that never happened is
        put right by `_due`."""
        if state == SUBMITTED:
            self._times.waiting_first(task_id)

    def _indexed(self, task_id: str, state: str, *, moved: bool = True) -> None:
        """After a write: the task placed in the time index of its state
        (only where a status came with the write: an artifact or a message
        leaves the task where it was, and costs the database nothing), its
        expiry, its turn ended once out of flight, and its watchers woken."""
        now = self._clock()
        if moved:
            self._times.placed(task_id, state)
        if self._ttl and is_terminal(state):
            _touch_whole(self._expires / task_id, now + self._ttl)
        if state not in IN_FLIGHT:
            self._turns.leave(task_id)
        self._notifier.notify(task_id)

    def _place(self, task_id: str, task: Task) -> None:
        """Under the task's lock, before the write that moves it: where the
        task will sit. A writer that stops between the two leaves a position
        ahead of its task, which the listing puts right when it reads the task."""
        expires = None
        if self._ttl and is_terminal(state_of(task)):
            expires = self._clock() + self._ttl
        self._positions.append([placed(task_id, task, expires)])

    def _repair_position(self, task_id: str) -> None:
        """Where the task stands, read under its lock, logged again."""
        with self._locked(task_id):
            record = self._read(task_id, locked=True)
            if record is None:
                self._positions.append([gone(task_id)], synced=False)
                return
            expires = _mtime_of(self._expires / task_id) if self._ttl else None
            finite = expires if expires is not None and expires != float("inf") else None
            self._positions.append([placed(task_id, record.task, finite)], synced=False)

    def _stored_ids(self) -> set[str]:
        """The ids of the directory's task files."""
        with os.scandir(self.directory) as entries:
            return {
                entry.name[:-5]
                for entry in entries
                if entry.name.endswith(".json") and is_safe_id(entry.name[:-5])
            }

    def _positions_may_lag(self) -> bool:
        """Whether the log of positions may have lost lines that the task
        files kept: a power cut, when the fsync policy does not sync each line."""
        return not self._durability.inline and self._positions.written_before(self._booted)

    def purge_expired(self) -> int:
        """Remove every finished task past its time to live, with its log,
        markers and message record (and the small documents past their
        time); the number of tasks removed."""
        self.documents.forget_expired()
        if not self._ttl:
            return 0
        purged = 0
        for task_id in _older(self._expires, self._clock()):
            with self._locked(task_id):
                if not self._expired(task_id):
                    continue  # given a new time to live since the scan
                found = _read_task_file(self._task_file(task_id))
                stored = found[1] if found is not None else None
                if stored is not None and _is_wrapper(stored):
                    stored = stored["task"]
                record = self._message_record(cast(Task, stored)) if stored else None
                if record is not None and _read_text(record) == task_id:  # not a newer task's
                    record.unlink(missing_ok=True)
                self._positions.append([gone(task_id)])
                self._times.forget(task_id)  # (a finished task is in none, but for a torn write)
                for path in (
                    self._task_file(task_id),
                    self._log / f"{task_id}.jsonl",
                    self._expires / task_id,
                ):
                    path.unlink(missing_ok=True)
            purged += 1
        return purged

    def _message_record(self, task: Task) -> Path | None:
        """Where the record of the message that created `task` is kept."""
        history = task.get("history") or []
        if not history or not history[0].get("messageId"):
            return None
        return self._messages / message_key(task.get("owner", ""), history[0]["messageId"])

    def _claim_context(self, context_id: str, owner: str) -> None:
        path = self._contexts / digest(context_id)
        if _create_exclusively(path, owner.encode()):
            return
        if (_read_text(path) or "") != owner:
            raise ContextTaken(f"context {context_id} belongs to another caller")

    @contextmanager
    def _locked(self, *names: str) -> Iterator[None]:
        """The stripe locks of `names`, each once, in ascending order (so two
        holders of several stripes never wait on each other)."""
        stripes = sorted({zlib.crc32(name.encode()) % _STRIPES for name in names})
        locked: list[int] = []
        try:
            for stripe in stripes:
                path = self._locks / str(stripe)
                locked.append(open_no_link(path, os.O_RDWR | os.O_CREAT))
                flock_within(locked[-1], path)
            yield
        finally:
            for fd in reversed(locked):
                unlock(fd)

    # --- telling waiters in this process about other processes' writes ------

    def _log_stamp(self, task_id: str) -> tuple[int, int]:
        # A log grows by appends and is replaced by a trim (a new inode), so
        # its inode and size together change with every write.
        try:
            info = os.stat(self._logs.path(task_id), follow_symlinks=False)
        except OSError:
            return (-1, -1)
        return (info.st_ino, info.st_size)


def _read_bytes(path: Path) -> bytes | None:
    """The file's content, never through a link."""
    found = _read_with_status(path)
    return found[0] if found is not None else None


def _read_with_status(path: Path) -> tuple[bytes, os.stat_result] | None:
    """The file's content and its status (of the very file read), never
    through a link."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError as error:
        if error.errno == errno.ELOOP:
            log.warning("task store: ignoring the symbolic link %s", path)
        return None
    try:
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            return file.read(), info
    except OSError:
        return None


def _read_text(path: Path) -> str | None:
    raw = _read_bytes(path)
    try:
        return raw.decode() if raw is not None else None
    except UnicodeDecodeError:
        return None


def _write_atomically(path: Path, data: bytes) -> None:
    """A temporary file renamed over `path`: readers see the old or the new
    content, never a part; the rename replaces a link, never follows it."""
    temp, _ = _temporary(path, data, fsync=False)
    try:
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def _temporary(path: Path, data: bytes, *, fsync: bool) -> tuple[Path, os.stat_result]:
    """A finished temporary file beside `path` holding `data`, and its status
    (a rename keeps its inode and times)."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            if fsync:
                os.fsync(file.fileno())
            info = os.fstat(file.fileno())
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return Path(temp), info


def _record(task: Task, base: int, events: list[tuple[int, Event]]) -> Record:
    """`task` (including the events up to `base`) with `events` folded over it."""
    seq = events[-1][0] if events else base
    return Record(fold(task, [event for _, event in events]), seq, len(events))


def _content_digest(raw: bytes) -> str:
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def _identity(info: os.stat_result) -> tuple[int, ...]:
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _read_task_file(path: Path) -> tuple[bytes, dict[str, Any], os.stat_result] | None:
    """The task file's bytes, its JSON object and its status; None when
    missing or not an object."""
    found = _read_with_status(path)
    if found is None:
        return None
    raw, info = found
    try:
        stored = decode(raw)
    except ValueError:
        return None
    return (raw, stored, info) if isinstance(stored, dict) else None


def _is_wrapper(stored: dict[str, Any]) -> bool:
    """The task file format before tasks were stored bare: {"seq", "task"}."""
    return (
        stored.keys() == {"seq", "task"}
        and isinstance(stored["seq"], int)
        and isinstance(stored["task"], dict)
    )


def _create_exclusively(path: Path, data: bytes) -> bool:
    """Write `path` with `data` unless it exists; True if this call made it.
    (A hard link of a finished temporary file: never visible half-written.)"""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.link(temp, path, follow_symlinks=False)
        return True
    except FileExistsError:
        return False
    finally:
        Path(temp).unlink(missing_ok=True)


def _touch_whole(path: Path, when: float) -> None:
    """`path` with mtime `when`, renamed into place only once it has it. An
    expiry marker seen with its creation time reads as due: the task would
    read as gone, and be purged, the moment it finished."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.close(fd)
        os.utime(temp, (when, when))
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _older(folder: Path, cutoff: float) -> list[str]:
    with os.scandir(folder) as entries:
        return [
            entry.name for entry in entries if is_safe_id(entry.name) and _mtime(entry) < cutoff
        ]


def _mtime_of(path: Path) -> float:
    try:
        return os.stat(path, follow_symlinks=False).st_mtime
    except FileNotFoundError:
        return float("inf")


def _mtime(entry: os.DirEntry[str]) -> float:
    try:
        return entry.stat(follow_symlinks=False).st_mtime
    except FileNotFoundError:
        return float("inf")  # removed while listing: it left the index


def file_store(
    directory: str | os.PathLike[str],
    clock: Clock = time.time,
    terminal_ttl: float | None = None,
    fsync: str = ALWAYS,
) -> FileStore:
    return FileStore(directory, clock, terminal_ttl, fsync)
