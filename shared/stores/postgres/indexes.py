"""Scored indexes (`shared.indexes`) on PostgreSQL, beside the tasks: the
table `indexes` (migrations/0011_push_documents.sql), one statement a call.
Members of one score are ordered by their text (the "C" collation)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

from shared.stores.postgres.statements import Statements

_ADD: Final = (
    "INSERT INTO indexes (name, member, score) VALUES (%s, %s, %s::float8)"
    " ON CONFLICT (name, member) DO UPDATE SET score = excluded.score"
)
_REMOVE: Final = "DELETE FROM indexes WHERE name = %s AND member = ANY(%s::text[])"
_PLACE: Final = (
    "WITH added AS (INSERT INTO indexes (name, member, score)"
    " SELECT n, %(member)s, s FROM unnest(%(names)s::text[], %(scores)s::float8[]) AS x(n, s)"
    " ON CONFLICT (name, member) DO UPDATE SET score = excluded.score RETURNING 1)"
    " DELETE FROM indexes WHERE member = %(member)s AND name = ANY(%(gone)s::text[])"
)
_RESCORE: Final = (
    "UPDATE indexes SET score = %s::float8 WHERE name = %s AND member = ANY(%s::text[])"
)
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

    def place(self, member: str, scores: Mapping[str, float | None]) -> None:
        added = {name: score for name, score in scores.items() if score is not None}
        gone = [name for name, score in scores.items() if score is None]
        self._statements.run(
            _PLACE,
            {
                "member": member,
                "names": list(added),
                "scores": list(added.values()),
                "gone": gone,
            },
        )

    def rescore(self, name: str, members: Sequence[str], score: float) -> None:
        if members:
            self._statements.run(_RESCORE, (score, name, list(members)))

    def score(self, name: str, member: str) -> float | None:
        row = self._statements.maybe(
            "SELECT score FROM indexes WHERE name = %s AND member = %s", (name, member)
        )
        return None if row is None else float(row[0])

    def range(
        self, name: str, upto: float = math.inf, limit: int | None = None
    ) -> list[tuple[str, float]]:
        rows = self._statements.rows(_RANGE, (name, upto, limit))
        return [(str(member), float(score)) for member, score in rows]
