"""Push state on PostgreSQL, beside the tasks (see `shared.push.contract`).

Tables (migrations/0002_push.sql): `push_configs`, `push_cursors`,
`push_leases` per (task, config), and `push_tasks` (still swept, or when a
finished task's push state is forgotten). A lease is taken or renewed in
one statement (an upsert that only overwrites a lease of the same holder, a
booking or one run out), so two deliveries never both hold a pair; a
booking's holder is stored with the BOOKED prefix (`shared.push.contract`).
The store makes it from its statement runner (`shared.stores.postgres.statements`).
"""

from __future__ import annotations

import time
from typing import cast

from shared.codec import decode, encode
from shared.push.contract import BOOKED, Cursor, PushConfig, TooManyConfigs
from shared.store.contract import require_safe_id
from shared.stores.postgres.statements import Statements

_TAKE = """
INSERT INTO push_leases AS l VALUES (%(task)s, %(config)s, %(stored)s, %(until)s::float8)
ON CONFLICT (task_id, config_id) DO UPDATE SET holder = excluded.holder, until = excluded.until
  WHERE l.until <= %(now)s::float8 OR (%(running)s AND (l.holder = excluded.holder
    OR starts_with(l.holder, %(booked)s)))
RETURNING 1
"""
_FORGET = """
WITH a AS (DELETE FROM push_configs WHERE task_id = ANY(%(ids)s::text[])),
b AS (DELETE FROM push_cursors WHERE task_id = ANY(%(ids)s::text[])),
c AS (DELETE FROM push_leases WHERE task_id = ANY(%(ids)s::text[]))
DELETE FROM push_tasks WHERE task_id = ANY(%(ids)s::text[])
"""


class PostgresPush:
    def __init__(self, statements: Statements, ttl: float | None = None) -> None:
        self._statements = statements
        self._ttl = ttl

    def put(self, config: PushConfig, cap: int) -> None:
        task_id = require_safe_id(config["taskId"])
        added = self._statements.one(
            "SELECT push_put(%s, %s, %s, %s::integer)",
            (task_id, config["id"], encode(config), cap),
        )[0]
        if not added:
            raise TooManyConfigs(f"task {task_id} already has {cap} push configs")

    def config(self, task_id: str, config_id: str) -> PushConfig | None:
        row = self._statements.maybe(
            "SELECT body FROM push_configs WHERE task_id = %s AND config_id = %s",
            (require_safe_id(task_id), config_id),
        )
        return cast(PushConfig, decode(row[0])) if row is not None else None

    def configs(self, task_id: str) -> list[PushConfig]:
        rows = self._statements.rows(
            "SELECT body FROM push_configs WHERE task_id = %s ORDER BY config_id",
            (require_safe_id(task_id),),
        )
        return [cast(PushConfig, decode(body)) for (body,) in rows]

    def delete(self, task_id: str, config_id: str) -> bool:
        key = (require_safe_id(task_id), config_id)
        removed = self._statements.one(
            "WITH gone AS (DELETE FROM push_configs WHERE task_id = %s AND config_id = %s"
            " RETURNING 1), cursor AS (DELETE FROM push_cursors WHERE task_id = %s"
            " AND config_id = %s) SELECT count(*) FROM gone",
            (*key, *key),
        )[0]
        return bool(removed)

    def cursor(self, task_id: str, config_id: str) -> Cursor:
        row = self._statements.maybe(
            "SELECT delivered, failures, since, given_up FROM push_cursors"
            " WHERE task_id = %s AND config_id = %s",
            (require_safe_id(task_id), config_id),
        )
        if row is None:
            return Cursor()
        delivered, failures, since, given_up = row
        return Cursor(int(delivered), int(failures), float(since), int(given_up))

    def set_cursor(self, task_id: str, config_id: str, cursor: Cursor) -> None:
        self._statements.run(
            "INSERT INTO push_cursors VALUES (%s, %s, %s, %s, %s::float8, %s)"
            " ON CONFLICT (task_id, config_id) DO UPDATE SET delivered = excluded.delivered,"
            " failures = excluded.failures, since = excluded.since, given_up = excluded.given_up",
            (
                require_safe_id(task_id),
                config_id,
                cursor.delivered,
                cursor.failures,
                cursor.since,
                cursor.given_up,
            ),
        )

    def book(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        return self._take(task_id, config_id, BOOKED + holder, seconds, running=False)

    def lease(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        return self._take(task_id, config_id, holder, seconds, running=True)

    def _take(
        self, task_id: str, config_id: str, stored: str, seconds: float, *, running: bool
    ) -> bool:
        now = time.time()
        row = self._statements.maybe(
            _TAKE,
            {
                "task": require_safe_id(task_id),
                "config": config_id,
                "stored": stored,
                "until": now + seconds,
                "now": now,
                "running": running,
                "booked": BOOKED,
            },
        )
        return row is not None

    def release(self, task_id: str, config_id: str, holder: str) -> None:
        self._statements.run(
            "DELETE FROM push_leases WHERE task_id = %s AND config_id = %s AND holder = %s",
            (require_safe_id(task_id), config_id, holder),
        )

    def pushing(self) -> list[str]:
        now = time.time()
        gone = self._statements.rows(
            "SELECT task_id FROM push_tasks WHERE forget_at <= %s::float8", (now,)
        )
        if gone:
            self._statements.run(_FORGET, {"ids": [task_id for (task_id,) in gone]})
        rows = self._statements.rows(
            "SELECT task_id FROM push_tasks WHERE pushing ORDER BY task_id", ()
        )
        return [task_id for (task_id,) in rows]

    def done(self, task_id: str) -> None:
        forget_at = time.time() + self._ttl if self._ttl else None
        self._statements.run(
            "INSERT INTO push_tasks VALUES (%s, false, %s::float8) ON CONFLICT (task_id)"
            " DO UPDATE SET pushing = false, forget_at = excluded.forget_at",
            (require_safe_id(task_id), forget_at),
        )

    def forget(self, task_id: str) -> None:
        self._statements.run(_FORGET, {"ids": [require_safe_id(task_id)]})
