"""Scored indexes (`shared.indexes`) in a SQL table, `indexes` (name, member,
score), keyed by (name, member) and read in the order of (name, score,
member), for PostgreSQL and SQLite alike. Members of one score are ordered
by their bytes (PostgreSQL's "C" collation, SQLite's binary one)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

from shared.stores.sql.runner import Runner, Transaction

_ADD: Final = (
    "INSERT INTO indexes (name, member, score) VALUES (:name, :member, :score)"
    " ON CONFLICT (name, member) DO UPDATE SET score = excluded.score"
)
_REMOVE: Final = "DELETE FROM indexes WHERE name = :name AND member = :member"
_RESCORE: Final = "UPDATE indexes SET score = :score WHERE name = :name AND member = :member"
_SCORE: Final = "SELECT score FROM indexes WHERE name = :name AND member = :member"
_RANGE: Final = (
    "SELECT member, score FROM indexes WHERE name = :name AND score <= :upto"
    " ORDER BY score, member LIMIT :limit"
)


class SqlIndexes:
    def __init__(self, runner: Runner) -> None:
        self._runner = runner

    def add(self, name: str, member: str, score: float) -> None:
        self._runner.count(_ADD, {"name": name, "member": member, "score": float(score)})

    def remove(self, name: str, *members: str) -> None:
        self._each(_REMOVE, [{"name": name, "member": member} for member in members])

    def place(self, member: str, scores: Mapping[str, float | None]) -> None:
        if scores:
            self._runner.atomically(lambda t: place_in(t, member, scores))

    def rescore(self, name: str, members: Sequence[str], score: float) -> None:
        self._each(_RESCORE, [{"name": name, "member": m, "score": float(score)} for m in members])

    def score(self, name: str, member: str) -> float | None:
        rows = self._runner.rows(_SCORE, {"name": name, "member": member})
        return float(rows[0][0]) if rows else None

    def range(
        self, name: str, upto: float = math.inf, limit: int | None = None
    ) -> list[tuple[str, float]]:
        unlimited = self._runner.dialect.unlimited
        params = {"name": name, "upto": upto, "limit": unlimited if limit is None else limit}
        return [(str(member), float(score)) for member, score in self._runner.rows(_RANGE, params)]

    def _each(self, text: str, rows: list[dict[str, object]]) -> None:
        """The statement for each row, in one step: one statement alone (a
        transaction of several costs PostgreSQL two more round trips)."""
        if len(rows) == 1:
            self._runner.count(text, rows[0])
        elif rows:
            self._runner.atomically(lambda t: t.each(text, rows))


def place_in(transaction: Transaction, member: str, scores: Mapping[str, float | None]) -> None:
    """`place`, inside a transaction already begun (a store whose tasks share
    the database places a task with its own write)."""
    added = [
        {"name": name, "member": member, "score": float(score)}
        for name, score in scores.items()
        if score is not None
    ]
    gone = [name for name, score in scores.items() if score is None]
    if added:
        transaction.each(_ADD, added)
    if gone:
        # Out of every other index in one statement: a lookup of the key each.
        names = ", ".join(f":name{number}" for number in range(len(gone)))
        params = {f"name{number}": name for number, name in enumerate(gone)}
        transaction.send(
            f"DELETE FROM indexes WHERE member = :member AND name IN ({names})",
            {"member": member, **params},
        )
