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
    """Statements inside one transaction begun on `cursor`, in the shared form."""

    def __init__(self, cursor: Cursor, dialect: Dialect) -> None:
        self._cursor = cursor
        self._dialect = dialect

    @property
    def dialect(self) -> Dialect:
        return self._dialect

    def execute(self, text: str, params: Parameters) -> int:
        """The rows the statement changed."""
        return int(self._cursor.execute(self._dialect.compiled(text), params).rowcount)

    def rows(self, text: str, params: Parameters) -> list[Any]:
        """The rows a query reads."""
        return list(self._cursor.execute(self._dialect.compiled(text), params).fetchall())

    def one(self, text: str, params: Parameters) -> Any:
        """The first row a query reads, or None."""
        return self._cursor.execute(self._dialect.compiled(text), params).fetchone()

    def each(self, text: str, params: Iterable[Parameters]) -> None:
        """The statement once for each set of parameters."""
        self._cursor.executemany(self._dialect.compiled(text), list(params))


class Runner(Protocol):
    dialect: Dialect

    def rows(self, text: str, params: Parameters) -> list[Sequence[Any]]:
        """The rows one query reads."""

    def count(self, text: str, params: Parameters) -> int:
        """One statement that writes, in a transaction of its own: the rows it changed."""

    def atomically(self, work: Callable[[Transaction], R]) -> R:
        """`work`'s statements in one transaction, committed when it returns."""
