"""Small documents (`shared.documents`) on PostgreSQL, beside the
tasks: the table `documents` (migrations/0009_documents.sql). A read and
a swap are one statement each, by the database's clock; no lock is held
between them."""

from __future__ import annotations

from typing import Any, Final

from psycopg.types.json import Jsonb

from shared.documents import ABSENT, Document, new_version
from shared.stores.postgres.statements import Statements

_NOW: Final = "extract(epoch FROM clock_timestamp())::float8"
_READ: Final = (
    f"WITH c AS (SELECT {_NOW} AS now) SELECT d.version, d.body, c.now FROM c"
    " LEFT JOIN documents d ON d.name = %s AND alive(d.expires, c.now)"
)
# Written where it is not there, or only there expired.
_CREATE: Final = (
    f"WITH c AS (SELECT {_NOW} AS now)"
    " INSERT INTO documents (name, version, body, expires)"
    " SELECT %s, %s, %s, c.now + %s::float8 FROM c"
    " ON CONFLICT (name) DO UPDATE SET version = excluded.version, body = excluded.body,"
    f" expires = excluded.expires WHERE NOT alive(documents.expires, {_NOW})"
)
_UPDATE: Final = (
    f"UPDATE documents SET version = %s, body = %s, expires = {_NOW} + %s::float8"
    " WHERE name = %s AND version = %s"
)
_DELETE: Final = "DELETE FROM documents WHERE name = %s AND version = %s"
_THERE: Final = f"SELECT 1 FROM documents WHERE name = %s AND alive(expires, {_NOW})"
_FORGET: Final = f"DELETE FROM documents WHERE expires <= {_NOW}"


class PostgresDocuments:
    def __init__(self, statements: Statements) -> None:
        self._statements = statements

    def document(self, name: str) -> Document:
        version, body, now = self._statements.one(_READ, (name,))
        if version is None:
            return Document(ABSENT, None, float(now))
        return Document(str(version), body, float(now))

    def swap(self, name: str, version: str, value: Any, ttl: float | None = None) -> bool:
        if version == ABSENT:
            if value is None:  # still not there: nothing to write
                return self._statements.maybe(_THERE, (name,)) is None
            changed = self._statements.count(_CREATE, (name, new_version(), Jsonb(value), ttl))
        elif value is None:
            changed = self._statements.count(_DELETE, (name, version))
        else:
            changed = self._statements.count(
                _UPDATE, (new_version(), Jsonb(value), ttl, name, version)
            )
        return changed == 1

    def forget_expired(self) -> None:
        """Drop the documents past their time (a read already skips them)."""
        self._statements.run(_FORGET, ())
