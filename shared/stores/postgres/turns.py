"""The turn book on PostgreSQL, beside the tasks (`shared.owners.turns`).

One row of `turn_book` (migrations/0006_turn_book.sql) holds the whole book,
`TurnState` as JSONB. Each step is one transaction: the row read `FOR
UPDATE`, the database's clock read (`clock_timestamp()`, after the lock, so
front ends and workers with skewed clocks agree, as Redis's `TIME` makes
them on the Redis store), the step applied here, the row written back (not
when the step changed nothing). Reads (`held_among`, `in_flight`, `view`)
take no lock: they see the book as last committed.

So this book serializes every step of the fleet on one row: one round trip
of a few statements and a JSON document of the held and in-flight tasks a
step, which is fine for the sends a PostgreSQL deployment makes. Should it
ever show in a profile, the next step is a table per concept (held tasks,
in flight, owners' passes, workers) as the Redis book keeps a key per
concept. The store makes it from its statement runner
(`shared.stores.postgres.statements`), so every failure is a StoreError.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import psycopg

from shared.owners.book import SteppedBook, TurnState
from shared.stores.postgres.statements import Statements

log = logging.getLogger(__name__)

T = TypeVar("T")

_LOCK = "SELECT state FROM turn_book WHERE id FOR UPDATE"
_NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"
_ADD = "INSERT INTO turn_book VALUES (true, '{}') ON CONFLICT (id) DO NOTHING"
_SAVE = "UPDATE turn_book SET state = %s::jsonb WHERE id"
_VIEW = "SELECT state, extract(epoch FROM clock_timestamp())::float8 FROM turn_book WHERE id"


class PostgresTurnBook(SteppedBook):
    def __init__(self, statements: Statements) -> None:
        self._statements = statements

    def _read(self, read: Callable[[TurnState, float], T]) -> T:
        row = self._statements.maybe(_VIEW, ())
        if row is None:
            return read(TurnState(), float(self._statements.one(_NOW, ())[0]))
        return read(_state(row[0]), float(row[1]))

    # --- internals -----------------------------------------------------------

    def _step(self, step: Callable[[TurnState, float], T]) -> T:
        with self._statements.connection() as conn, conn.transaction():
            stored = _locked(conn)
            state = _state(stored)
            (now,) = _one(conn.execute(_NOW, prepare=True).fetchone())
            result = step(state, float(now))
            data = state.to_json()
            if _text(data) != _text(stored):
                conn.execute(_SAVE, (json.dumps(data, separators=(",", ":")),), prepare=True)
        return result


def _locked(conn: psycopg.Connection[Any]) -> Any:
    """The book's row, locked until the transaction ends (made again if it
    was deleted by hand)."""
    row = conn.execute(_LOCK, prepare=True).fetchone()
    if row is None:
        conn.execute(_ADD)
        row = _one(conn.execute(_LOCK).fetchone())
    return row[0]


def _one(row: Any) -> Any:
    assert row is not None, "the statement returns a row"
    return row


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
