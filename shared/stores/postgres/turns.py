"""The turn book on PostgreSQL, beside the tasks (`shared.owners.turns`).

One row of `turn_book` (migrations 0006 and 0008) holds the whole book,
`TurnState` as JSONB, and a version. Each step compares and sets: one
statement reads the book, its version and the database's clock
(`clock_timestamp()`, so front ends and workers with skewed clocks agree, as
Redis's `TIME` makes them on the Redis store); the step is applied here; a
second statement writes the book back only if its version is still the one
read (not at all when the step changed nothing). Should another step have
come between, this one is applied again to the book as it now stands,
until the store's timeout. No lock is held between the two statements: a
client that vanishes mid-step (a process killed, a connection lost) leaves
nothing behind, where a row locked `FOR UPDATE` across round trips would
stop every step of the fleet until the server ended its session. A write
that takes a task out of flight also takes it out of the book, in its own
statement (`after_write`), bumping the version.

Reads (`held_among`, `in_flight`, `view`) see the book as last written.
The store makes the book from its statement runner
(`shared.stores.postgres.statements`), so every failure is a StoreError.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from shared.errors import StoreError
from shared.owners.book import SteppedBook, TurnState
from shared.stores.postgres.statements import Statements

log = logging.getLogger(__name__)

T = TypeVar("T")

_READ = (
    "SELECT state, version, extract(epoch FROM clock_timestamp())::float8 FROM turn_book WHERE id"
)
_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"
_ADD = "INSERT INTO turn_book VALUES (true, '{}') ON CONFLICT (id) DO NOTHING"
_SET = "UPDATE turn_book SET state = %s::jsonb, version = version + 1 WHERE id AND version = %s"
# Between two tries of a step that another step came between.
_PAUSE, _PAUSE_MAX = 0.001, 0.05


class PostgresTurnBook(SteppedBook):
    def __init__(self, statements: Statements, timeout: float) -> None:
        """`timeout`: how long a step is tried again while other steps keep
        coming between (the store's timeout)."""
        self._statements = statements
        self._timeout = timeout

    def _read(self, read: Callable[[TurnState, float], T]) -> T:
        row = self._statements.maybe(_READ, ())
        if row is None:
            return read(TurnState(), float(self._statements.one(_NOW, ())[0]))
        return read(_state(row[0]), float(row[2]))

    # --- internals -----------------------------------------------------------

    def _step(self, step: Callable[[TurnState, float], T]) -> T:
        deadline = time.monotonic() + self._timeout
        pause = _PAUSE
        while True:
            row = self._statements.maybe(_READ, ())
            if row is None:  # deleted by hand: made again
                self._statements.run(_ADD, ())
                continue
            stored, version, now = row
            state = _state(stored)
            result = step(state, float(now))
            data = state.to_json()
            if _text(data) == _text(stored):
                return result
            written = json.dumps(data, separators=(",", ":"))
            if self._statements.count(_SET, (written, version)) == 1:
                return result
            if time.monotonic() >= deadline:
                raise StoreError(
                    "task store unavailable: the turn book kept changing under a step"
                    f" for {self._timeout:g} s",
                    "the turn book stayed contended",
                )
            time.sleep(random.uniform(0, pause))
            pause = min(pause * 2, _PAUSE_MAX)


def _state(stored: Any) -> TurnState:
    """The book from its JSONB; an unreadable one (edited by hand) starts again
    empty: beat's resend holds again whatever was in it."""
    if stored is None:
        return TurnState()
    try:
        if not isinstance(stored, Mapping):
            raise ValueError("not a JSON object")
        return TurnState.from_json(stored)
    except (ValueError, TypeError, AttributeError) as error:
        log.warning("task store: the turn book is unreadable (%s): started afresh", error)
        return TurnState()


def _text(value: Any) -> str:
    """JSON to compare two books by (tuples and lists alike, keys in order)."""
    return json.dumps(value, sort_keys=True)
