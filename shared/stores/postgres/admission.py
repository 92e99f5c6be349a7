"""The send ledger on PostgreSQL, beside the tasks (see
`shared.owners.admission`).

Tables (migrations/0005_owner_limits.sql): `owner_buckets` (an owner's
tokens, and when it last took one) and `owner_active` (the task ids it
reserved a slot for), owners named by their digest. Each step is one
statement: a function call (`owner_take`, `owner_reserve`, by the
database's clock) or a plain DELETE or SELECT. A message key's record is
the task that holds it (`tasks.mkey`), read as `create_task` reads it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from shared.store.contract import digest
from shared.stores.postgres.statements import Statements


class PostgresLedger:
    def __init__(self, statements: Statements, clock: Callable[[], float] = time.time) -> None:
        """`clock`: the store's, which its tasks' expiry times are read by."""
        self._statements = statements
        self._clock = clock

    def take(self, owner: str, rate: float, size: int) -> float:
        wait = self._statements.one(
            "SELECT owner_take(%s, %s::float8, %s::float8)", (_named(owner), rate, size)
        )[0]
        return float(wait)

    def reserve(self, owner: str, task_id: str, cap: int) -> Mapping[str, float] | None:
        rows = self._statements.rows(
            "SELECT held, age FROM owner_reserve(%s, %s, %s::integer)",
            (_named(owner), task_id, cap),
        )
        return {held: float(age) for held, age in rows} if rows else None

    def release(self, owner: str, *task_ids: str) -> None:
        if task_ids:
            self._statements.run(
                "DELETE FROM owner_active WHERE o = %s AND task_id = ANY(%s::text[])",
                (_named(owner), list(task_ids)),
            )

    def accepted(self, message_key: str) -> str | None:
        row = self._statements.maybe(
            "SELECT id FROM tasks WHERE mkey = %s AND alive(expires, %s::float8)",
            (message_key, self._clock()),
        )
        return str(row[0]) if row is not None else None


def _named(owner: str) -> str:
    return digest("owner", owner)
