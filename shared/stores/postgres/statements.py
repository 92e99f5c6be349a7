"""Statements on one store's pooled connections, for every room kept in its
schema (the tasks, their push state).

Any failure of PostgreSQL itself is one StoreError that names the cause, a
unique key another transaction took is `KeyTaken`, and a database whose
schema is behind is refused, checked on the first connection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg_pool import PoolTimeout

from shared.errors import StoreError
from shared.quoting import truncated
from shared.stores.postgres.pool import ForkSafePool
from shared.stores.postgres.schema import UPGRADE_COMMAND as UPGRADE_HINT
from shared.stores.postgres.schema import behind
from shared.stores.sql.dialects import POSTGRESQL
from shared.stores.sql.runner import Parameters, Transaction

R = TypeVar("R")


class KeyTaken(Exception):
    """A unique key (a message key) was taken by a concurrent transaction."""


class Statements:
    """Runs statements on `pool`'s connections to `schema`; `where` (host:port/
    database, never the password) is what its errors name."""

    def __init__(self, pool: ForkSafePool, schema: str, where: str) -> None:
        self._pool = pool
        self._schema = schema
        self._where = where
        self._checked = False

    def one(self, query: Any, args: Any) -> Any:
        row = self.maybe(query, args)
        assert row is not None, "the statement returns a row"
        return row

    def maybe(self, query: Any, args: Any) -> Any:
        with self.connection() as conn:
            return conn.execute(query, args, prepare=True).fetchone()

    def rows(self, query: Any, args: Any) -> list[Any]:
        with self.connection() as conn:
            return conn.execute(query, args, prepare=True).fetchall()

    def run(self, query: Any, args: Any) -> None:
        with self.connection() as conn:
            conn.execute(query, args, prepare=True)

    def count(self, query: Any, args: Any) -> int:
        """The rows the statement changed."""
        with self.connection() as conn:
            return conn.execute(query, args, prepare=True).rowcount

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection; any failure of PostgreSQL itself is one
        StoreError naming the cause, and an unmigrated database is refused."""
        try:
            with self._pool.connection() as conn:
                if not self._checked:
                    if reason := behind(conn, self._schema):
                        raise StoreError(
                            f"task store unusable: PostgreSQL at {self._where}: {reason}", reason
                        )
                    self._checked = True
                yield conn
        except psycopg.errors.UniqueViolation as error:
            raise KeyTaken() from error
        except psycopg.errors.UndefinedTable as error:
            reason = f"the database has no toolnexus schema: run `{UPGRADE_HINT}`"
            raise StoreError(
                f"task store unusable: PostgreSQL at {self._where}: {reason}", reason
            ) from error
        except (psycopg.Error, PoolTimeout) as error:
            detail = truncated(str(error).strip() or type(error).__name__, 200)
            raise StoreError(
                f"task store unavailable: PostgreSQL at {self._where}: {detail}", _reason(error)
            ) from error


def _reason(error: Exception) -> str:
    if isinstance(error, PoolTimeout):
        return "cannot connect to PostgreSQL"
    if isinstance(error, psycopg.errors.ReadOnlySqlTransaction):
        return "PostgreSQL is a read-only standby"
    if isinstance(error, psycopg.errors.InsufficientPrivilege):
        return "the PostgreSQL user lacks a permission"
    if isinstance(
        error, psycopg.errors.InvalidPassword | psycopg.errors.InvalidAuthorizationSpecification
    ):
        return "PostgreSQL refused the credentials"
    if isinstance(error, psycopg.errors.QueryCanceled):
        return "PostgreSQL did not answer in time"
    if isinstance(error, psycopg.OperationalError):
        return "cannot connect to PostgreSQL"
    return "PostgreSQL refused the statement"


class PostgresRunner:
    """The shared SQL (`shared.stores.sql`) on these statements' connections."""

    dialect = POSTGRESQL

    def __init__(self, statements: Statements) -> None:
        self._statements = statements

    def rows(self, text: str, params: Parameters) -> list[Any]:
        return self._statements.rows(POSTGRESQL.compiled(text), params)

    def count(self, text: str, params: Parameters) -> int:
        return self._statements.count(POSTGRESQL.compiled(text), params)

    def atomically(self, work: Callable[[Transaction], R]) -> R:
        with self._statements.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            return work(Transaction(cursor, POSTGRESQL))
