"""The shared SQL (`shared.stores.sql`) on a SQLite database: a read is one
query as of one moment, a write one `BEGIN IMMEDIATE` transaction."""

from __future__ import annotations

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
