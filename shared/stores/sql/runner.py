"""How the shared SQL reaches a database: a `Runner` each SQL store gives the
features it keeps in tables (`shared.stores.sql.documents`, `.indexes`).

Statements are written in the shared form (`shared.stores.sql.dialects`);
the runner compiles them for its database. `rows` reads, `count` runs one
statement that writes, in a transaction of its own, and `atomically` runs
several in one transaction, through a `Transaction`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from shared.stores.sql.dialects import Dialect

R = TypeVar("R")
Parameters = Mapping[str, object]


class Cursor(Protocol):
    """What a DB-API cursor (or sqlite3's connection) offers a statement."""

    def execute(self, query: Any, params: Any = ...) -> Any: ...

    def executemany(self, query: Any, params_seq: Any) -> Any: ...


class Transaction:
    """Statements inside one transaction begun on `cursor`, in the shared form.
    `sync`, where the statements are pipelined (sent before the answers to
    the earlier ones are read): what sends everything pending and reads
    every answer, called before any answer is read. Each exchange then ends
    where the server waits for the client as idle in the transaction, which
    its timeout ends: a client that stops between two exchanges holds its
    locks no longer than that."""

    def __init__(
        self,
        cursor: Cursor,
        dialect: Dialect,
        sync: Callable[[], object] | None = None,
        cursors: Callable[[], Cursor] | None = None,
    ) -> None:
        """`cursors`: a new cursor of the transaction's connection, where a
        cursor's `execute` returns the cursor itself (by default `cursor`,
        whose `execute` returns a new one, as sqlite3's connection does)."""
        self._cursor = cursor
        self._dialect = dialect
        self._sync = sync
        self._cursors = cursors or (lambda: cursor)

    @property
    def dialect(self) -> Dialect:
        return self._dialect

    def execute(self, text: str, params: Parameters) -> int:
        """The rows the statement changed."""
        cursor = self._cursor.execute(self._dialect.compiled(text), params)
        self._answered()
        return int(cursor.rowcount)

    def send(self, text: str, params: Parameters) -> None:
        """A statement whose answer is not read (pipelined where the
        transaction is)."""
        self._cursor.execute(self._dialect.compiled(text), params)

    def rows(self, text: str, params: Parameters) -> list[Any]:
        """The rows a query reads."""
        cursor = self._cursor.execute(self._dialect.compiled(text), params)
        self._answered()
        return list(cursor.fetchall())

    def firsts(self, *queries: tuple[str, Parameters]) -> list[Any]:
        """The first row each query reads (None where it reads none), run in
        order and, where the transaction is pipelined, sent together."""
        opened = [
            self._cursors().execute(self._dialect.compiled(text), params)
            for text, params in queries
        ]
        self._answered()
        return [cursor.fetchone() for cursor in opened]

    def one(self, text: str, params: Parameters) -> Any:
        """The first row a query reads, or None."""
        cursor = self._cursor.execute(self._dialect.compiled(text), params)
        self._answered()
        return cursor.fetchone()

    def each(self, text: str, params: Iterable[Parameters]) -> None:
        """The statement once for each set of parameters."""
        self._cursor.executemany(self._dialect.compiled(text), list(params))

    def _answered(self) -> None:
        if self._sync is not None:
            self._sync()


class Runner(Protocol):
    dialect: Dialect

    def rows(self, text: str, params: Parameters) -> list[Sequence[Any]]:
        """The rows one query reads."""

    def count(self, text: str, params: Parameters) -> int:
        """One statement that writes, in a transaction of its own: the rows it changed."""

    def atomically(self, work: Callable[[Transaction], R]) -> R:
        """`work`'s statements in one transaction, committed when it returns."""


class Inside:
    """A runner inside the transaction `t` already begun (a feature's step
    made part of a store's own write)."""

    def __init__(self, t: Transaction) -> None:
        self._t = t
        self.dialect = t.dialect

    def rows(self, text: str, params: Parameters) -> list[Any]:
        return self._t.rows(text, params)

    def count(self, text: str, params: Parameters) -> int:
        return self._t.execute(text, params)

    def atomically(self, work: Callable[[Transaction], R]) -> R:
        return work(self._t)
