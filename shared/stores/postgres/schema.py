"""The PostgreSQL store's schema: numbered migrations, applied by a command.

Migrations are the package's `migrations/NNNN_name.sql` files, applied in
order to one schema (`toolnexus` unless told: several deployments, or the
tests, can share a database), each in its own transaction together with its
row in `<schema>.schema_version`; an advisory lock keeps two `db upgrade`s from
applying the same one twice. A request never migrates: a store on a
database whose schema is behind refuses to serve and names the command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import psycopg

UPGRADE_COMMAND = "toolnexus-serve db upgrade"
# Any number the upgrades of one database agree on (pg_advisory_xact_lock).
_LOCK = 0x746E7873  # "tnxs"
_NAME = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")
DEFAULT_SCHEMA = "toolnexus"
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def checked_schema(name: str) -> str:
    """`name` if it is a plain lower-case identifier (it is written into SQL)."""
    if not _SCHEMA.fullmatch(name):
        raise ValueError(f"bad PostgreSQL schema name {name!r}: use 1-63 of a-z, 0-9 and _")
    return name


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """Every migration shipped with the package, in order."""
    found = []
    for entry in resources.files(__package__).joinpath("migrations").iterdir():
        match = _NAME.fullmatch(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    found.sort(key=lambda migration: migration.version)
    versions = [migration.version for migration in found]
    assert versions == list(range(1, len(found) + 1)), f"migrations not numbered 1..n: {versions}"
    return found


def latest() -> int:
    return len(migrations())


def applied(conn: psycopg.Connection[Any], schema: str = DEFAULT_SCHEMA) -> int:
    """The version the schema is at (0: never migrated)."""
    table = f"{checked_schema(schema)}.schema_version"
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    if not row or not row[0]:
        return 0
    row = conn.execute(f"SELECT coalesce(max(version), 0) FROM {table}").fetchone()
    return int(row[0]) if row else 0


def upgrade(conn: psycopg.Connection[Any], schema: str = DEFAULT_SCHEMA) -> list[Migration]:
    """Apply the migrations the schema lacks; the ones applied. The
    migrations name no schema: each runs with the search path set to it
    (and the functions they create keep that path)."""
    schema = checked_schema(schema)
    done = []
    for migration in migrations():
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {schema}.schema_version ("
                " version integer PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            )
            if applied(conn, schema) >= migration.version:
                continue
            conn.execute(f"SET LOCAL search_path TO {schema}")
            conn.execute(migration.sql.encode())
            conn.execute(
                f"INSERT INTO {schema}.schema_version (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            done.append(migration)
    return done


def behind(conn: psycopg.Connection[Any], schema: str = DEFAULT_SCHEMA) -> str | None:
    """Why this schema cannot be served (behind or ahead of this release), or None."""
    have, want = applied(conn, schema), latest()
    if have == want:
        return None
    if have > want:
        return (
            f"the database schema is at version {have}, newer than this release's {want}:"
            " upgrade toolnexus-serve"
        )
    return f"the database schema is at version {have} of {want}: run `{UPGRADE_COMMAND}`"
