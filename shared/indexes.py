"""Scored indexes: the store primitive under the features that keep sets of
tasks in an order of their own (the tasks whose webhooks are still swept,
to begin with).

An index is a set of members (task ids), each with a score (a time, in
seconds since the epoch, or any number a feature orders by), under a name:
`add` puts a member in (or moves it to a new score), `remove` takes members
out, `place` puts one member in some indexes and out of others at once,
`rescore` moves members that are in an index (and only those) to a new
score, `score` reads one member's score, and `range` reads them in order
of score (members of one score in order of their text) up to a score, at
most `limit` of them. Every process on the store shares its indexes; each
call is one atomic step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Protocol


class Indexes(Protocol):
    """A store's scored indexes. Names are the features' own, never a
    client's raw text; members are task ids."""

    def add(self, name: str, member: str, score: float) -> None: ...

    def remove(self, name: str, *members: str) -> None: ...

    def place(self, member: str, scores: Mapping[str, float | None]) -> None:
        """`member` put in each index named with a score, and taken out of
        each named with None, in one step."""

    def rescore(self, name: str, members: Sequence[str], score: float) -> None:
        """Those of `members` in the index moved to `score`; a member not in
        it stays out."""

    def score(self, name: str, member: str) -> float | None:
        """The member's score in the index; None where it is not in it."""

    def range(
        self, name: str, upto: float = math.inf, limit: int | None = None
    ) -> list[tuple[str, float]]:
        """The members scored at most `upto`, lowest score first, with their
        scores; at most `limit` of them (None: all)."""
