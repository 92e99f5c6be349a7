"""`toolnexus-serve db upgrade|status`: the PostgreSQL store's schema
(and `db copy TARGET`, every task into another store: `worker.cli.store_copy`).

`upgrade` applies the migrations the configured database lacks (each in
its own transaction, under a lock, so two at once do no harm) and says
which; `status` says where the schema stands and exits 1 when it is
behind. Both take the store from TOOLNEXUS_STORE (or --store), which must
be a postgresql:// URL: no other store has a schema. Nothing else ever
migrates: the store refuses a database that is behind, naming this command.
"""

from __future__ import annotations

import sys
from typing import Any

from shared.errors import ConfigError
from shared.settings import Settings
from shared.store.spec import POSTGRES_SCHEMES

ACTIONS = ("upgrade", "status")


def run(argv: list[str], program: str) -> int:
    if argv[:1] == ["copy"]:
        from worker.cli.store_copy import run as copy

        return copy(argv[1:], program)
    if len(argv) != 1 or argv[0] not in ACTIONS:
        print(f"{program}: say upgrade, status or copy (see {program} --help)", file=sys.stderr)
        return 2
    try:
        spec = Settings.from_env().store
    except ConfigError as error:
        print(f"{program}: {error}", file=sys.stderr)
        return 2
    if not spec or not spec.startswith(POSTGRES_SCHEMES):
        print(
            f"{program}: TOOLNEXUS_STORE is {spec!r}, not a postgresql:// URL:"
            " only the PostgreSQL store has a schema to migrate",
            file=sys.stderr,
        )
        return 2
    try:
        import psycopg

        from shared.stores.postgres import schema
        from shared.stores.postgres.store import postgres_store
    except ImportError as error:
        print(f"{program}: {error}; install toolnexus-serve[postgres]", file=sys.stderr)
        return 2
    store = postgres_store(spec)
    try:
        with psycopg.connect(store.conninfo, autocommit=True, connect_timeout=5) as conn:
            return _act(argv[0], conn, store.schema, schema)
    except psycopg.Error as error:
        detail = " ".join(str(error).split()) or type(error).__name__
        print(f"{program}: PostgreSQL: {detail}", file=sys.stderr)
        return 1


def _act(action: str, conn: Any, name: str, schema: Any) -> int:
    if action == "upgrade":
        done = schema.upgrade(conn, name)
        applied = ", ".join(f"{m.version:04d}_{m.name}" for m in done) or "nothing to apply"
        now = schema.applied(conn, name)
        print(f"schema {name}: {applied}; at version {now} of {schema.latest()}")
        return 0
    reason = schema.behind(conn, name)
    print(f"schema {name}: {reason or f'at version {schema.latest()}, current'}")
    return 1 if reason else 0
