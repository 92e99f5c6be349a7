"""Small documents (`shared.documents`) in a SQLite database: the table
`documents`, a read one query and a swap one write transaction, by the
clock of the store that keeps them (the machine's: every process on the
database runs on one host)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from shared.codec import decode, encode
from shared.documents import ABSENT, Document, new_version
from shared.stores.sqlite.database import Database

SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS documents (name TEXT PRIMARY KEY, version TEXT NOT NULL,"
    " body TEXT NOT NULL, expires REAL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS documents_expiring ON documents (expires)"
    " WHERE expires IS NOT NULL",
)
_READ: Final = "SELECT version, body, expires FROM documents WHERE name = ?"


class SqliteDocuments:
    def __init__(self, database: Database, clock: Callable[[], float] = time.time) -> None:
        self._database = database
        self._clock = clock

    def document(self, name: str) -> Document:
        now = self._clock()
        rows = self._database.read(_READ, (name,))
        version, body = _alive(rows, now)
        return Document(version, None if body is None else decode(body), now)

    def swap(self, name: str, version: str, value: Any, ttl: float | None = None) -> bool:
        body = None if value is None else encode(value)

        def change(connection: Any) -> bool:
            now = self._clock()
            if _alive(connection.execute(_READ, (name,)).fetchall(), now)[0] != version:
                return False
            if body is None:
                connection.execute("DELETE FROM documents WHERE name = ?", (name,))
            else:
                connection.execute(
                    "INSERT OR REPLACE INTO documents VALUES (?, ?, ?, ?)",
                    (name, new_version(), body, None if ttl is None else now + ttl),
                )
            return True

        return self._database.write(change)

    def forget_expired(self) -> None:
        """Drop the documents past their time (a read already skips them)."""
        now = self._clock()
        self._database.write(
            lambda c: c.execute("DELETE FROM documents WHERE expires <= ?", (now,))
        )


def _alive(rows: list[Any], now: float) -> tuple[str, str | None]:
    """The version and body of the row read, or ABSENT where none is there
    or it has expired."""
    if not rows:
        return ABSENT, None
    version, body, expires = rows[0]
    if expires is not None and expires <= now:
        return ABSENT, None
    return str(version), str(body)
