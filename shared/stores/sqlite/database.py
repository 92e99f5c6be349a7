"""One SQLite database file, shared by every process on one host.

The database runs in WAL mode (readers never wait for the writer) with
`synchronous=NORMAL` (a transaction survives the process that wrote it; a
power cut may lose the last ones, never corrupt the file), or `FULL` when
asked to fsync every transaction. Each process opens its own connections,
one per OS thread, never carried across a fork (a Celery prefork child opens
its own). The greenlets of a gevent-patched thread share its connection,
one at a time, and with it SQLite's cache of the pages read: a connection
of their own each would read again every page another wrote.

A write is one `BEGIN IMMEDIATE` transaction. SQLite's own busy handler
sleeps in C, where gevent cannot run other greenlets, so the database is
opened with no busy timeout and a write that finds it locked is tried again
here, with short sleeps a patched process spends on other greenlets, and
given up after `within` seconds with a StoreError: a writer paused while it
holds the lock (SIGSTOP, a stalled VM) stops no one for longer.
"""

from __future__ import annotations

import ctypes
import os
import random
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Final, TypeVar

from shared.errors import StoreError
from shared.ops.patching import os_thread_local

R = TypeVar("R")


class _Connection(sqlite3.Connection):
    """A connection this process opened (a subclass, to be weakly referenced)."""


# A thread's connection: the process that opened it, the connection, its lock.
_Kept = tuple[int, sqlite3.Connection, threading.RLock]

# Every connection open in this process, and those held across a fork.
_OPEN: weakref.WeakSet[_Connection] = weakref.WeakSet()
_FORKED: list[_Connection] = []


class _Gate:
    """No thread of this process is inside SQLite, or inside a transaction,
    when it forks: each call and each transaction passes the gate (any number
    at once); a fork closes it, waits for those inside to end, and opens it
    again on both sides. Forked inside SQLite, a child would keep the
    library's mutexes held, and its first connection wait for ever; forked
    inside a transaction, it would keep the parent's record of that
    transaction's locks (SQLite keeps one per process), and wait on them."""

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._inside = 0
        self._closed = False
        self._depth = threading.local()

    @contextmanager
    def passed(self) -> Iterator[None]:
        depth = getattr(self._depth, "n", 0)
        if depth == 0:
            with self._condition:
                while self._closed:
                    self._condition.wait()
                self._inside += 1
        self._depth.n = depth + 1
        try:
            yield
        finally:
            self._depth.n = depth
            if depth == 0:
                with self._condition:
                    self._inside -= 1
                    if self._inside == 0:
                        self._condition.notify_all()

    def close(self) -> None:
        with self._condition:
            self._closed = True
            while self._inside:
                self._condition.wait()

    def open(self) -> None:
        with self._condition:
            self._closed = False
            self._condition.notify_all()

    def reset(self) -> None:
        """In the child: only the forking thread is left, outside SQLite."""
        self._condition = threading.Condition(threading.Lock())
        self._inside, self._closed = 0, False
        self._depth = threading.local()


_GATE = _Gate()


def _before_fork() -> None:
    _GATE.close()
    _FORKED[:] = list(_OPEN)  # alive across the fork, whichever thread opened them


def _after_fork_in_parent() -> None:
    _FORKED.clear()
    _GATE.open()


def _after_fork_in_child() -> None:
    """The parent's connections are never closed in the child: closing one
    there (as freeing it does) may checkpoint or reset the write-ahead log
    from a copy of the parent's state, under the processes using it, and
    lose pages. Each is given a reference the child never lets go of
    (CPython's C API, `Py_IncRef`), so it is never freed: the child opens its own."""
    for connection in _FORKED:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(connection))
    _FORKED.clear()
    _GATE.reset()


os.register_at_fork(
    before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
)

# Long enough for any writer that is running; a paused one is a fault.
WITHIN: Final = 2.0
_PAUSE: Final = 0.001
_PAUSE_MAX: Final = 0.05


class Database:
    def __init__(
        self,
        path: Path,
        schema: Iterable[str],
        *,
        fsync: bool = False,
        within: float = WITHIN,
    ) -> None:
        """`schema`: the statements that make the tables when they are not
        there (each `CREATE ... IF NOT EXISTS`), run at each process's first
        connection."""
        self.path = path
        self._schema = tuple(schema)
        self._synchronous = "FULL" if fsync else "NORMAL"
        self._within = within
        self._local = os_thread_local()

    def write(self, change: Callable[[sqlite3.Connection], R]) -> R:
        """`change` run in one write transaction, committed when it returns
        (rolled back when it raises)."""
        with self._held("BEGIN IMMEDIATE") as connection:
            try:
                result = change(connection)
                connection.execute("COMMIT")
                return result
            except BaseException as error:
                connection.execute("ROLLBACK")
                if isinstance(error, sqlite3.Error):
                    raise _failed(self.path, error) from error
                raise

    def read(
        self, query: str, args: Iterable[object] | Mapping[str, object] = ()
    ) -> list[tuple[object, ...]]:
        """The rows of one query, read as of one moment (outside any write)."""
        bound = args if isinstance(args, Mapping) else tuple(args)
        with self._held() as connection:
            return self._retried(lambda: connection.execute(query, bound).fetchall())

    def snapshot(self, reads: Callable[[sqlite3.Connection], R]) -> R:
        """`reads` (several queries) run in one read transaction: every query
        sees the database as of one moment, and no writer waits for it."""
        with self._held("BEGIN") as connection:
            try:
                return self._retried(lambda: reads(connection))
            finally:
                connection.execute("COMMIT")

    @contextmanager
    def _held(self, begin: str | None = None) -> Iterator[sqlite3.Connection]:
        """This thread's connection, for the caller alone (the greenlets of a
        thread share it), inside the gate (no fork in the middle of a
        transaction); with `begin`, in the transaction it begins. A database
        another process keeps locked is tried again up to the deadline, the
        connection let go between tries, so this process's reads go on."""
        connection, lock = self._connection()
        deadline = time.monotonic() + self._within
        pause = _PAUSE
        while True:
            with lock, _GATE.passed():
                try:
                    if begin is not None:
                        connection.execute(begin)
                except sqlite3.OperationalError as error:
                    if not _busy(error):
                        raise _failed(self.path, error) from error
                except sqlite3.Error as error:
                    raise _failed(self.path, error) from error
                else:
                    yield connection
                    return
            pause = self._paused(deadline, pause)

    def _retried(self, step: Callable[[], R]) -> R:
        """`step`, tried again while the database is locked, up to the deadline."""
        deadline = time.monotonic() + self._within
        pause = _PAUSE
        while True:
            try:
                with _GATE.passed():
                    return step()
            except sqlite3.OperationalError as error:
                if not _busy(error):
                    raise _failed(self.path, error) from error
            except sqlite3.Error as error:
                raise _failed(self.path, error) from error
            pause = self._paused(deadline, pause)

    def _paused(self, deadline: float, pause: float) -> float:
        """A short sleep before the next try (a patched process runs other
        greenlets meanwhile), and the pause after it; past the deadline, a
        StoreError."""
        if time.monotonic() >= deadline:
            raise StoreError(
                f"task store: {self.path} stayed locked for {self._within:g} s"
                " (its writer is stalled?)",
                "the task database stayed locked",
            )
        time.sleep(random.uniform(pause / 2, pause))
        return min(pause * 2, _PAUSE_MAX)

    def close(self) -> None:
        """Let go of this thread's connection (the others close with their threads)."""
        kept: _Kept | None = getattr(self._local, "connection", None)
        if kept is not None and kept[0] == os.getpid():
            with kept[2], _GATE.passed():
                kept[1].close()
        self._local.connection = None

    def _connection(self) -> tuple[sqlite3.Connection, threading.RLock]:
        kept: _Kept | None = getattr(self._local, "connection", None)
        if kept is not None and kept[0] == os.getpid():
            return kept[1], kept[2]
        # One greenlet of the thread opens it (opening may yield); the others wait.
        opening: threading.Lock = self._local.__dict__.setdefault(
            f"opening.{os.getpid()}", threading.Lock()
        )
        with opening:
            kept = getattr(self._local, "connection", None)
            if kept is not None and kept[0] == os.getpid():
                return kept[1], kept[2]
            return self._opened()

    def _opened(self) -> tuple[sqlite3.Connection, threading.RLock]:
        # One made before a fork is the parent's: never used here, nor closed
        # (`_after_fork_in_child`).
        _made_for_its_user(self.path)
        try:
            with _GATE.passed():
                connection = sqlite3.connect(
                    self.path,
                    isolation_level=None,
                    timeout=0,
                    check_same_thread=True,
                    factory=_Connection,
                )
            _OPEN.add(connection)
        except sqlite3.Error as error:
            raise _failed(self.path, error) from error
        self._retried(lambda: connection.execute("PRAGMA journal_mode=WAL"))
        self._retried(lambda: connection.execute(f"PRAGMA synchronous={self._synchronous}"))
        # The greenlets that share the connection take turns on it.
        made: _Kept = (os.getpid(), connection, threading.RLock())
        self._local.connection = made
        if self._schema:
            self.write(lambda c: [c.execute(statement) for statement in self._schema])
        return made[1], made[2]


def _made_for_its_user(path: Path) -> None:
    """The database file made by this service for its user alone, if it is
    not there yet (SQLite makes the WAL and shared-memory files with the same
    mode); a symbolic link there is refused. Made only when new: opening and
    closing an existing database outside SQLite would drop every POSIX lock
    this process's connections hold on it (a close drops them all), and let
    another process checkpoint or reset the log under them."""
    if os.path.islink(path):
        raise StoreError(
            f"task store: {path} is a symbolic link; refusing it",
            "the task database cannot be opened",
        )
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except FileExistsError:
        pass  # there already (made by another process, or a link made meanwhile: SQLite's to open)
    except OSError as error:
        raise StoreError(
            f"task store: {path}: {error.strerror}", "the task database cannot be opened"
        ) from error


def _busy(error: sqlite3.OperationalError) -> bool:
    return getattr(error, "sqlite_errorcode", None) in (
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
    ) or "locked" in str(error)


def _failed(path: Path, error: sqlite3.Error) -> StoreError:
    return StoreError(f"task store: {path}: {error}", "the task database cannot be used")
