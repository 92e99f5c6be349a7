"""Scored indexes (`shared.indexes`) on PostgreSQL, beside the tasks: the
table `indexes` (migrations/0011_push_documents.sql), one statement a call.
Members of one score are ordered by their text (the "C" collation)."""

from __future__ import annotations

import math
from typing import Final

from shared.stores.postgres.statements import Statements

_ADD: Final = (
    "INSERT INTO indexes (name, member, score) VALUES (%s, %s, %s::float8)"
    " ON CONFLICT (name, member) DO UPDATE SET score = excluded.score"
)
_REMOVE: Final = "DELETE FROM indexes WHERE name = %s AND member = ANY(%s::text[])"
_RANGE: Final = (
    "SELECT member, score FROM indexes WHERE name = %s AND score <= %s::float8"
    " ORDER BY score, member LIMIT %s"
)


class PostgresIndexes:
    def __init__(self, statements: Statements) -> None:
        self._statements = statements

    def add(self, name: str, member: str, score: float) -> None:
        self._statements.run(_ADD, (name, member, score))

    def remove(self, name: str, *members: str) -> None:
        if members:
            self._statements.run(_REMOVE, (name, list(members)))

    def range(
        self, name: str, upto: float = math.inf, limit: int | None = None
    ) -> list[tuple[str, float]]:
        rows = self._statements.rows(_RANGE, (name, upto, limit))
        return [(str(member), float(score)) for member, score in rows]
