"""Scored indexes (`shared.indexes`) in a SQLite database: the table
`indexes`, keyed by (name, member), read in the order of (name, score,
member) through an index of its own."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

from shared.stores.sqlite.database import Database

SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS indexes (name TEXT NOT NULL, member TEXT NOT NULL,"
    " score REAL NOT NULL, PRIMARY KEY (name, member)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS indexes_scored ON indexes (name, score, member)",
)


class SqliteIndexes:
    def __init__(self, database: Database) -> None:
        self._database = database

    def add(self, name: str, member: str, score: float) -> None:
        self._database.write(
            lambda c: c.execute(
                "INSERT OR REPLACE INTO indexes VALUES (?, ?, ?)", (name, member, float(score))
            )
        )

    def remove(self, name: str, *members: str) -> None:
        if members:
            self._database.write(
                lambda c: c.executemany(
                    "DELETE FROM indexes WHERE name = ? AND member = ?",
                    [(name, member) for member in members],
                )
            )

    def place(self, member: str, scores: Mapping[str, float | None]) -> None:
        if scores:
            self._database.write(lambda c: place_in(c, member, scores))

    def rescore(self, name: str, members: Sequence[str], score: float) -> None:
        if members:
            self._database.write(
                lambda c: c.executemany(
                    "UPDATE indexes SET score = ? WHERE name = ? AND member = ?",
                    [(float(score), name, member) for member in members],
                )
            )

    def score(self, name: str, member: str) -> float | None:
        rows = self._database.read(
            "SELECT score FROM indexes WHERE name = ? AND member = ?", (name, member)
        )
        return float(rows[0][0]) if rows else None  # type: ignore[arg-type]

    def range(
        self, name: str, upto: float = math.inf, limit: int | None = None
    ) -> list[tuple[str, float]]:
        rows = self._database.read(
            "SELECT member, score FROM indexes WHERE name = ? AND score <= ?"
            " ORDER BY score, member LIMIT ?",
            (name, upto, -1 if limit is None else limit),
        )
        return [(str(member), float(score)) for member, score in rows]  # type: ignore[arg-type]


def place_in(connection: Any, member: str, scores: Mapping[str, float | None]) -> None:
    """`place`, as part of a write transaction already begun on `connection`
    (a store whose tasks share the database places them with their write)."""
    for name, score in scores.items():
        if score is None:
            connection.execute("DELETE FROM indexes WHERE name = ? AND member = ?", (name, member))
        else:
            connection.execute(
                "INSERT OR REPLACE INTO indexes VALUES (?, ?, ?)", (name, member, float(score))
            )
