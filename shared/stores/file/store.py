"""A directory of `<id>.json` files: durable, greppable, shareable.

The file store is the SQLite store (`shared.stores.sqlite`) kept inside the
directory, with each task also written as a file of its own:

  <id>.json     the task itself, pretty-printed, replaced atomically each
                time the store writes it whole (a new task, a state it rests
                in, every 32 events): `jq .status.state tasks/*.json` reads
                every state
  .store.db     the SQLite database (with its -wal and -shm files): the
                tasks' event logs, listings, message keys, contexts, time
                indexes, the turn book, send limits and push state

A task file is written inside the database transaction that stores the task
whole (renamed into place before the commit, not synced: the database is the
record), and the database records its content's digest; after the machine
goes down, the first process to open the store writes again, synced, every
file that is not the one recorded. A read takes the task from the database when the file is
the one it recorded; a missing file, a symbolic link or one that is not a
task reads as an unknown task; any other file (written by hand, by the
seed's store, or renamed into place by a write whose commit a crash
stopped) is adopted: it is the task as it stands, and its status goes into
the log as the next event. A directory written by an earlier version is
taken over when the store opens (`shared.stores.file.takeover`).

Several processes on one host share the directory: SQLite's locking is not
to be trusted over a network file system, so writers share one host (the
task files can be read from anywhere).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from shared.codec import decode, encode
from shared.documents import ABSENT
from shared.errors import StoreError
from shared.events import Event, current_status, fold
from shared.owners.book import DocumentBook
from shared.push.documents import DocumentPush
from shared.store.contract import LOG_LIMIT, Record, is_safe_id, message_key
from shared.store.spec import ALWAYS, FSYNC_POLICIES
from shared.stores.file.documents_upgrade import take_over as take_over_documents
from shared.stores.file.documents_upgrade import take_over_markers
from shared.stores.file.push_upgrade import take_over as take_over_push
from shared.stores.file.takeover import clear_earlier, earlier_layout, take_over, task_in
from shared.stores.sql.dialects import SQLITE
from shared.stores.sql.indexes import place_in
from shared.stores.sql.runner import Transaction
from shared.stores.sql.tasks import read_one
from shared.stores.sqlite.store import SqliteStore
from shared.task import Task, epoch, state_of

log = logging.getLogger(__name__)

Clock = Callable[[], float]
# The SQLite database inside the directory.
DATABASE = ".store.db"
FILES = (
    "CREATE TABLE IF NOT EXISTS files (id TEXT PRIMARY KEY, digest TEXT NOT NULL,"
    " stat TEXT NOT NULL) WITHOUT ROWID"
)
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class FileStore(SqliteStore):
    SCHEMA = (*SqliteStore.SCHEMA, FILES)

    def __init__(
        self,
        directory: str | os.PathLike[str],
        clock: Clock = time.time,
        terminal_ttl: float | None = None,
        fsync: str = ALWAYS,
        log_limit: int = LOG_LIMIT,
        booted: float | None = None,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync policy {fsync!r}: use one of {', '.join(FSYNC_POLICIES)}")
        self.directory = Path(directory)
        # Only this service's user reads or writes what the store creates.
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if self.directory.is_symlink():
            raise StoreError(f"task store: {directory} is a symbolic link; refusing to use it")
        for suffix in ("", "-wal", "-shm"):
            if (self.directory / f"{DATABASE}{suffix}").is_symlink():
                raise StoreError(f"task store: {DATABASE}{suffix} is a symbolic link; refusing it")
        self._files = TaskFiles(self.directory)
        self._log_limit = log_limit
        super().__init__(
            self.directory / DATABASE,
            clock,
            terminal_ttl,
            fsync=fsync == ALWAYS,
            log_limit=log_limit,
            booted=booted,
            copy=self._files,
        )
        take_over_documents(self.directory, self.database, clock)
        take_over_markers(self.directory, self.database)
        self._take_over_the_turn_book()
        self._take_over_the_files()

    def read(self, task_id: str) -> Record | None:
        if not is_safe_id(task_id):
            return None
        raw = _read(self._file(task_id))
        if raw is None:
            return None
        now = self._clock()
        record, recorded = self._reading(
            lambda t: (read_one(t, task_id, now), _recorded(t, task_id))
        )
        return record if recorded == _digest(raw) else self._adopted(task_id)

    def _push_upgrade(self) -> Callable[[DocumentPush], object]:
        return lambda push: take_over_push(self.directory, push)

    def ping(self) -> None:
        """Raise StoreError unless the directory is there and writable, and
        the database takes a write (an open database outlives its folder)."""
        probe = self.directory / f".ping.{os.getpid()}.{threading.get_ident()}"
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, 0o600))
            os.unlink(probe)
        except OSError as error:
            raise StoreError(
                f"task store unavailable: {self.directory}: {error.strerror}",
                f"the task directory is not writable ({error.strerror})",
            ) from None
        super().ping()

    # --- the task files ------------------------------------------------------

    def _after_a_boot(self, c: Any) -> None:
        """The machine went down since the database was last opened, and with
        it any task file written since that had not reached the disk (missing,
        empty, or an earlier one): each file that is not the one the database
        recorded is written again from it, synced, before the store serves. A
        hand edit made before the machine went down, not yet read through the
        store, goes with them."""
        again = 0
        for task_id, digest, stat in c.execute("SELECT id, digest, stat FROM files").fetchall():
            path = self._files.path(task_id)
            if _stat(path) == stat:
                continue
            raw = _read(path)
            if raw is not None and _digest(raw) == digest:  # the same file, its stat changed
                c.execute("UPDATE files SET stat = ? WHERE id = ?", (_stat(path), task_id))
                continue
            row = c.execute("SELECT doc FROM tasks WHERE id = ?", (task_id,)).fetchone()
            if row is not None:
                self._files.write(Transaction(c, SQLITE), decode(row[0]), synced=True)
                again += 1
        if again:
            _sync_directory(self.directory)
            log.warning(
                "task store: the machine went down since %s was last opened:"
                " %d task files written again from its database",
                self.directory,
                again,
            )

    def _adopted(self, task_id: str) -> Record | None:
        """The task as its file now holds it, taken into the log where the
        database did not write that file."""
        path = self._file(task_id)

        def change(t: Transaction, now: float) -> Record | None:
            raw = _read(path)
            if raw is None:
                return None
            if _recorded(t, task_id) == _digest(raw):
                return read_one(t, task_id, now)  # written meanwhile, by the store
            task = task_in(raw, task_id)
            if task is None:
                return None
            known = t.one("SELECT 1 FROM tasks WHERE id = :id", {"id": task_id})
            if known is None and _replaced(t, task):
                return None
            log.warning("task store: adopting the task file %s (not written by the store)", path)
            record = self._log.write(t, now, task, [current_status(task)], None, True)
            if known is None:
                _claim_its_message(t, task)
            return record

        found: Record | None = self._change(change)
        return found

    def _take_over_the_files(self) -> None:
        """Task files without a row (an earlier version's directory, the
        seed's, files copied in) taken in, once."""
        earlier = earlier_layout(self.directory)
        self.database.write(lambda c: take_over(c, self.directory, self._take, _digest))
        if earlier:
            clear_earlier(self.directory)

    def _take(
        self,
        c: Any,
        task_id: str,
        task: Task,
        base: int,
        after: list[tuple[int, Event]],
        logged: list[tuple[int, Event]],
        expires: float | None,
        raw: bytes,
    ) -> None:
        """One task file taken in: its row (the file's task, the events
        after it), its log, its status history, its time index and digest; a
        file with no log of its own (the seed's, or a create's cut off before
        its commit) with its message key, unless that send made another task."""
        unlogged = len(logged) == len(after) == 1
        t = Transaction(c, SQLITE)
        if unlogged and _replaced(t, task):
            return
        seq = after[-1][0] if after else base
        now_task = fold(task, [event for _, event in after])
        state = state_of(now_task)
        ts = epoch(now_task["status"].get("timestamp", ""))
        c.execute(
            "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, 0)",
            (task_id, encode(task), seq, base, state, ts, now_task.get("owner", ""),
             now_task.get("contextId", ""), expires),
        )  # fmt: skip
        kept = [(n, e) for n, e in logged if n > seq - self._log_limit or n > base]
        c.executemany(
            "INSERT OR REPLACE INTO events VALUES (?, ?, ?)",
            [(task_id, n, encode(e)) for n, e in kept],
        )
        c.executemany(
            "INSERT OR REPLACE INTO history VALUES (?, ?, ?, ?)",
            [
                (task_id, n, epoch(e["status"].get("timestamp", "")), e["status"]["state"])
                for n, e in logged
                if e["kind"] == "status-update"
            ],
        )
        placed = c.execute("SELECT 1 FROM indexes WHERE member = ? LIMIT 1", (task_id,)).fetchone()
        if placed is None:
            place_in(Transaction(c, SQLITE), task_id, self._times.scores(state))
        if json.loads(raw) == task:
            c.execute(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?)",
                (task_id, _digest(raw), _stat(self._file(task_id))),
            )
        else:  # an older wrapper around the task: rewritten as the task itself
            self._files.written(t, task)
        if unlogged:
            _claim_its_message(t, now_task)

    def _take_over_the_turn_book(self) -> None:
        """A turn book kept by an earlier version in `.turns/book.json` becomes
        the store's document, once (what it held keeps its turn)."""
        earlier = self.directory / ".turns" / "book.json"
        raw = _read(earlier)
        if raw is None:
            return
        try:
            state = json.loads(raw)
        except ValueError:
            state = None
        if isinstance(state, dict):
            self.documents.swap(DocumentBook.NAME, ABSENT, state)  # taken already: kept
        earlier.unlink(missing_ok=True)

    def _file(self, task_id: str) -> Path:
        return self._files.path(task_id)


class TaskFiles:
    """Each task as `<id>.json` in the directory, written in the transaction
    that writes the task whole (the task log's `Copy`), and its digest and
    stat in the table `files`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, task_id: str) -> Path:
        return self.directory / f"{task_id}.json"

    def written(self, t: Transaction, task: Task) -> None:
        """The task's file, renamed into place before the write commits, and
        its digest. The file is not synced: the database is the record, synced
        as the policy says, and after the machine goes down the store writes
        every file again that is not the one it recorded (`_after_a_boot`)."""
        self.write(t, task, synced=False)

    def write(self, t: Transaction, task: Task, *, synced: bool) -> None:
        data = _pretty(task)
        path = self.path(task["id"])
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                if synced:
                    file.flush()
                    os.fsync(file.fileno())
            os.replace(temp, path)
        except OSError as error:
            Path(temp).unlink(missing_ok=True)
            raise StoreError(f"task store: {path}: {error.strerror}") from error
        t.send(
            "INSERT OR REPLACE INTO files VALUES (:id, :digest, :stat)",
            {"id": task["id"], "digest": _digest(data), "stat": _stat(path)},
        )

    def differs(self, t: Transaction, task_id: str) -> bool:
        """A write that rolled back after its file's rename (its process
        killed in between) left a file the database did not record; the next
        write writes the task whole over it, so the file never lags behind a
        commit (until then a read adopts that file: the write, as it was
        computed over the task as it still stands)."""
        row = t.one("SELECT stat FROM files WHERE id = :id", {"id": task_id})
        return row is not None and row[0] != _stat(self.path(task_id))

    def forgotten(self, t: Transaction, task_ids: list[str]) -> None:
        for task_id in task_ids:
            self.path(task_id).unlink(missing_ok=True)
        t.each("DELETE FROM files WHERE id = :id", [{"id": task_id} for task_id in task_ids])


def _its_message(task: Task) -> str | None:
    """The message key of the send that made `task` (its first message's)."""
    history: list[Any] = list(task.get("history") or [])
    message_id = history[0].get("messageId") if history else None
    return message_key(task.get("owner", ""), message_id) if isinstance(message_id, str) else None


def _replaced(t: Transaction, task: Task) -> bool:
    """Whether the send that made `task` made another task the database
    keeps. A create renames its file into place before it commits; one cut
    off between the two leaves a file of a send never acknowledged, which the
    sender's retry may have made again since: that one is the task."""
    key = _its_message(task)
    found = t.one("SELECT id FROM tasks WHERE mkey = :key", {"key": key}) if key else None
    return found is not None and found[0] != task["id"]


def _claim_its_message(t: Transaction, task: Task) -> None:
    """A task file the database has no row for, taken in: its message key
    (where free: a retry of the send then finds this task) and its context."""
    key = _its_message(task)
    if key is not None:
        t.send(
            "UPDATE tasks SET mkey = :key WHERE id = :id AND NOT EXISTS"
            " (SELECT 1 FROM tasks WHERE mkey = :key)",
            {"key": key, "id": task["id"]},
        )
    params = {"context": task.get("contextId", ""), "owner": task.get("owner", "")}
    t.send("INSERT OR IGNORE INTO contexts VALUES (:context, :owner)", params)


def _recorded(t: Transaction, task_id: str) -> str | None:
    row = t.one("SELECT digest FROM files WHERE id = :id", {"id": task_id})
    return str(row[0]) if row else None


def _stat(path: Path) -> str:
    """What changes when the file is replaced: its inode, size and mtime."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return "gone"
    return f"{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"


def _pretty(task: Task) -> bytes:
    """The task as its file holds it: JSON indented by two spaces, UTF-8,
    ending in a newline (orjson; the standard library where orjson refuses a
    value, an integer past 64 bits)."""
    try:
        return orjson.dumps(task, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    except TypeError:
        return json.dumps(task, indent=2, ensure_ascii=False).encode() + b"\n"


def _digest(raw: bytes) -> str:
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def _read(path: Path) -> bytes | None:
    """The file's content, never through a link (one is logged)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError as error:
        if error.errno == errno.ELOOP:
            log.warning("task store: ignoring the symbolic link %s", path)
        return None
    try:
        with os.fdopen(fd, "rb") as file:
            return file.read()
    except OSError:
        return None


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_store(
    directory: str | os.PathLike[str],
    clock: Clock = time.time,
    terminal_ttl: float | None = None,
    fsync: str = ALWAYS,
) -> FileStore:
    return FileStore(directory, clock, terminal_ttl, fsync)
