"""Small documents (`shared.documents`) in a SQL table, `documents` (name,
version, body, expires), for PostgreSQL and SQLite alike: a read is one
query, a swap one statement that compares the version and writes, by the
database's clock (`shared.stores.sql.dialects`). An expired document reads
as absent, and a swap against its old version changes nothing."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from shared.codec import decode, encode
from shared.documents import ABSENT, Document, new_version
from shared.stores.sql.runner import Runner

_ALIVE: Final = "(expires IS NULL OR expires > {now})"
_READ: Final = (
    "SELECT d.version, d.{body_text}, c.now FROM (SELECT {now} AS now) c"
    " LEFT JOIN documents d ON d.name = :name AND (d.expires IS NULL OR d.expires > c.now)"
)
# Written where it is not there, or only there expired.
_CREATE: Final = (
    "INSERT INTO documents (name, version, body, expires)"
    " VALUES (:name, :version, {body}, {now} + :ttl)"
    " ON CONFLICT (name) DO UPDATE SET version = excluded.version, body = excluded.body,"
    " expires = excluded.expires"
    " WHERE documents.expires IS NOT NULL AND documents.expires <= {now}"
)
_UPDATE: Final = (
    "UPDATE documents SET version = :version, body = {body}, expires = {now} + :ttl"
    f" WHERE name = :name AND version = :was AND {_ALIVE}"
)
_DELETE: Final = f"DELETE FROM documents WHERE name = :name AND version = :was AND {_ALIVE}"
_THERE: Final = f"SELECT 1 FROM documents WHERE name = :name AND {_ALIVE}"
_FORGET: Final = "DELETE FROM documents WHERE expires <= {now}"


class SqlDocuments:
    """The documents of one database; `clock` is the store's (SQLite reads it,
    PostgreSQL its own)."""

    def __init__(self, runner: Runner, clock: Callable[[], float] = time.time) -> None:
        self._runner = runner
        self._clock = clock

    def document(self, name: str) -> Document:
        [(version, body, now)] = self._runner.rows(_READ, {"name": name, "now": self._clock()})
        if version is None:
            return Document(ABSENT, None, float(now))
        return Document(str(version), decode(body), float(now))

    def swap(self, name: str, version: str, value: Any, ttl: float | None = None) -> bool:
        params: dict[str, object] = {"name": name, "was": version, "now": self._clock()}
        if value is not None:
            ttl = None if ttl is None else float(ttl)
            params |= {"version": new_version(), "body": encode(value), "ttl": ttl}
        if version == ABSENT:
            if value is None:  # still not there: nothing to write
                return not self._runner.rows(_THERE, params)
            return self._runner.count(_CREATE, params) == 1
        return self._runner.count(_UPDATE if value is not None else _DELETE, params) == 1

    def forget_expired(self) -> None:
        """Drop the documents past their time (a read already skips them)."""
        self._runner.count(_FORGET, {"now": self._clock()})
