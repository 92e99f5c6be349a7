"""One SQLite database file, shared by every process on one host.

The database runs in WAL mode (readers never wait for the writer) with
`synchronous=NORMAL` (a transaction survives the process that wrote it; a
power cut may lose the last ones, never corrupt the file), or `FULL` when
asked to fsync every transaction. Each process opens its own connections,
one per thread, never carried across a fork (a Celery prefork child opens
its own).

A write is one `BEGIN IMMEDIATE` transaction. SQLite's own busy handler
sleeps in C, where gevent cannot run other greenlets, so the database is
opened with no busy timeout and a write that finds it locked is tried again
here, with short sleeps a patched process spends on other greenlets, and
given up after `within` seconds with a StoreError: a writer paused while it
holds the lock (SIGSTOP, a stalled VM) stops no one for longer.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final, TypeVar

from shared.errors import StoreError

R = TypeVar("R")

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
        self._local = threading.local()

    def write(self, change: Callable[[sqlite3.Connection], R]) -> R:
        """`change` run in one write transaction, committed when it returns
        (rolled back when it raises)."""
        connection = self._connection()
        self._retried(lambda: connection.execute("BEGIN IMMEDIATE"))
        try:
            result = change(connection)
            connection.execute("COMMIT")
            return result
        except BaseException as error:
            connection.execute("ROLLBACK")
            if isinstance(error, sqlite3.Error):
                raise _failed(self.path, error) from error
            raise

    def read(self, query: str, args: Iterable[object] = ()) -> list[tuple[object, ...]]:
        """The rows of one query, read as of one moment (outside any write)."""
        connection = self._connection()
        return self._retried(lambda: connection.execute(query, tuple(args)).fetchall())

    def snapshot(self, reads: Callable[[sqlite3.Connection], R]) -> R:
        """`reads` (several queries) run in one read transaction: every query
        sees the database as of one moment, and no writer waits for it."""
        connection = self._connection()
        self._retried(lambda: connection.execute("BEGIN"))
        try:
            return self._retried(lambda: reads(connection))
        finally:
            connection.execute("COMMIT")

    def _retried(self, step: Callable[[], R]) -> R:
        """`step`, tried again while the database is locked, up to the deadline."""
        deadline = time.monotonic() + self._within
        pause = _PAUSE
        while True:
            try:
                return step()
            except sqlite3.OperationalError as error:
                if not _busy(error):
                    raise _failed(self.path, error) from error
            except sqlite3.Error as error:
                raise _failed(self.path, error) from error
            if time.monotonic() >= deadline:
                raise StoreError(
                    f"task store: {self.path} stayed locked for {self._within:g} s"
                    " (its writer is stalled?)",
                    "the task database stayed locked",
                )
            time.sleep(random.uniform(pause / 2, pause))
            pause = min(pause * 2, _PAUSE_MAX)

    def close(self) -> None:
        """Let go of this thread's connection (the others close with their threads)."""
        kept = getattr(self._local, "connection", None)
        if kept is not None:
            kept[1].close()
            self._local.connection = None

    def _connection(self) -> sqlite3.Connection:
        kept: tuple[int, sqlite3.Connection] | None = getattr(self._local, "connection", None)
        if kept is not None and kept[0] == os.getpid():
            return kept[1]
        # A connection made before a fork belongs to the parent: left alone, never closed here.
        try:
            # Made by this service for its user alone (SQLite makes the WAL
            # and shared-memory files with the same mode), never through a link.
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        except OSError as error:
            raise StoreError(
                f"task store: {self.path}: {error.strerror}", "the task database cannot be opened"
            ) from error
        try:
            connection = sqlite3.connect(
                self.path, isolation_level=None, timeout=0, check_same_thread=True
            )
        except sqlite3.Error as error:
            raise _failed(self.path, error) from error
        self._retried(lambda: connection.execute("PRAGMA journal_mode=WAL"))
        connection.execute(f"PRAGMA synchronous={self._synchronous}")
        self._local.connection = (os.getpid(), connection)
        if self._schema:
            self.write(lambda c: [c.execute(statement) for statement in self._schema])
        return connection


def _busy(error: sqlite3.OperationalError) -> bool:
    return getattr(error, "sqlite_errorcode", None) in (
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
    ) or "locked" in str(error)


def _failed(path: Path, error: sqlite3.Error) -> StoreError:
    return StoreError(f"task store: {path}: {error}", "the task database cannot be used")
