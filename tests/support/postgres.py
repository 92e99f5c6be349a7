"""PostgreSQL for the tests: a fresh schema per test, on the machine's server.

`TOOLNEXUS_TEST_POSTGRES` (default postgresql://postgres@127.0.0.1:5432/postgres)
names a server and a database to administer it from. Once per session (per
xdist worker) a database is created; each test then gets a schema of its
own in it, migrated by `db upgrade`'s own code, named in the store URL
(`?schema=`), and dropped after the test. A schema costs a fraction of a
database (CREATE DATABASE copies and syncs a whole catalog: about 0.7 s
here, and as much again to drop). Where no server answers the tests are
skipped with the reason printed; under `CI=true` they fail instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from shared.stores.postgres import schema
from tests.support.redis_server import ci

ADMIN_URL = os.environ.get(
    "TOOLNEXUS_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=3)


def url_of(database: str, schema_name: str | None = None) -> str:
    """ADMIN_URL with another database (and schema), as a URL (what TOOLNEXUS_STORE takes)."""
    parts = conninfo_to_dict(make_conninfo(ADMIN_URL))
    user = parts.get("user", "postgres")
    password = f":{parts['password']}" if parts.get("password") else ""
    where = f"{parts.get('host', '127.0.0.1')}:{parts.get('port', 5432)}"
    query = f"?schema={schema_name}" if schema_name else ""
    return f"postgresql://{user}{password}@{where}/{database}{query}"


@contextmanager
def session_database() -> Iterator[str]:
    """A database for the session, dropped (with any connection left) at its end."""
    name = f"toolnexus_test_{uuid.uuid4().hex[:12]}"
    try:
        with admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
            # No test is about surviving a crash of the server: commits need
            # not wait for the disk (on this shared machine, most of a write).
            conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    except psycopg.OperationalError as error:
        message = f"NO POSTGRESQL at {ADMIN_URL} ({error}); PostgreSQL tests skipped"
        message = " ".join(message.split())
        if ci():
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield name
    finally:
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def fresh_schema(database: str, *, migrated: bool = True) -> Iterator[str]:
    """A store URL naming a new schema (migrated, or not at all), dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(url_of(database), autocommit=True) as conn:
        # A test's schema need not survive a crash of the server: its DDL
        # commits without waiting for the disk (most of its cost here).
        conn.execute("SET synchronous_commit = off")
        if migrated:
            schema.upgrade(conn, name)
        try:
            yield url_of(database, name)
        finally:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def execute(store_url: str, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    """Run one statement in the store URL's schema, behind the store's back
    (to plant corrupt data, or look at what it wrote); the rows it returned."""
    from shared.stores.postgres.store import split_url

    url, schema_name = split_url(store_url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema_name or schema.DEFAULT_SCHEMA}")
        cursor = conn.execute(statement.encode(), params)  # type: ignore[call-overload]
        return cursor.fetchall() if cursor.description else []
