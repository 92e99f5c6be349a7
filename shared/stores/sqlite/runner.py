"""The shared SQL (`shared.stores.sql`) on a SQLite database: a read is one
query as of one moment, a write one `BEGIN IMMEDIATE` transaction; or, with
`InWrite`, every statement inside a write transaction already begun."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from shared.stores.sql.dialects import SQLITE
from shared.stores.sql.runner import Parameters, Transaction
from shared.stores.sqlite.database import Database

R = TypeVar("R")


class SqliteRunner:
    dialect = SQLITE

    def __init__(self, database: Database) -> None:
        self._database = database

    def rows(self, text: str, params: Parameters) -> list[Any]:
        return self._database.read(SQLITE.compiled(text), params)

    def count(self, text: str, params: Parameters) -> int:
        query = SQLITE.compiled(text)
        return self._database.write(lambda c: int(c.execute(query, params).rowcount))

    def atomically(self, work: Callable[[Transaction], R]) -> R:
        return self._database.write(lambda c: work(Transaction(c, SQLITE)))


class InWrite:
    """The shared SQL inside a write transaction begun on `connection` (a
    feature's step made part of the store's own write)."""

    dialect = SQLITE

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    def rows(self, text: str, params: Parameters) -> list[Any]:
        return self._connection.execute(SQLITE.compiled(text), params).fetchall()

    def count(self, text: str, params: Parameters) -> int:
        return int(self._connection.execute(SQLITE.compiled(text), params).rowcount)

    def atomically(self, work: Callable[[Transaction], R]) -> R:
        return work(Transaction(self._connection, SQLITE))
