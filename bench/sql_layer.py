"""The SQL the PostgreSQL and SQLite stores share, run through the DB-API
drivers (psycopg, sqlite3) as the stores run it, beside the same statements
through SQLAlchemy Core: what decided the stores' SQL layer.

    pip install sqlalchemy   # for this benchmark only: the service does not use it
    python3 bench/sql_layer.py [--ops 2000] [--rounds 2]
                               [--postgres postgresql://postgres@127.0.0.1:5432/postgres]

Both paths run the one feature code (`shared.stores.sql.documents`) over a
runner: the stores' (`SqliteRunner`, `PostgresRunner`: the driver, a
statement compiled once per database) or one over a SQLAlchemy `Engine`
(its pool, `text()` statements, a connection checked out per call, as a
store over SQLAlchemy would; on PostgreSQL in autocommit, as the store's).
Each op is a document read and a swap of it (one read query, one statement
that writes). The rounds interleave the two paths, and each line prints
ops/s and the ratio SQLAlchemy / DB-API.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shared.stores.sql.dialects import POSTGRESQL, SQLITE, Dialect
from shared.stores.sql.documents import SqlDocuments
from shared.stores.sql.runner import Parameters, Runner, Transaction

R = TypeVar("R")


class AlchemyRunner:
    """The shared SQL through SQLAlchemy Core: `text()` takes `:name`
    parameters, so only the dialect's fragments are filled in."""

    def __init__(self, engine: Any, dialect: Dialect) -> None:
        from sqlalchemy import text

        self._engine = engine
        self._text = text
        self.dialect = dataclasses.replace(dialect, parameter=":{}", _compiled={})
        self._statements: dict[str, Any] = {}

    def _statement(self, text: str) -> Any:
        found = self._statements.get(text)
        if found is None:
            found = self._statements[text] = self._text(self.dialect.compiled(text))
        return found

    def rows(self, text: str, params: Parameters) -> list[Sequence[Any]]:
        with self._engine.connect() as connection:
            return list(connection.execute(self._statement(text), dict(params)).fetchall())

    def count(self, text: str, params: Parameters) -> int:
        with self._engine.begin() as connection:
            return int(connection.execute(self._statement(text), dict(params)).rowcount)

    def atomically(self, work: Callable[[Transaction], R]) -> R:
        raise NotImplementedError("documents need no transaction of several statements")


def timed(runner: Runner, ops: int) -> float:
    """Ops per second: a read and a swap of one document each."""
    documents = SqlDocuments(runner)
    name = f"bench:{uuid.uuid4().hex}"
    documents.swap(name, documents.document(name).version, {"n": 0})
    started = time.perf_counter()
    for n in range(ops):
        found = documents.document(name)
        assert documents.swap(name, found.version, {"n": n, "pad": "x" * 200})
    return ops / (time.perf_counter() - started)


def sqlite_pair(folder: Path) -> tuple[Runner, Runner]:
    from sqlalchemy import create_engine, event

    from shared.stores.sqlite.database import Database
    from shared.stores.sqlite.runner import SqliteRunner
    from shared.stores.sqlite.tables import SCHEMA

    path = folder / "tasks.db"
    ours = SqliteRunner(Database(path, SCHEMA))
    engine = create_engine(f"sqlite:///{path}")

    @event.listens_for(engine, "connect")
    def _settings(connection: Any, _: Any) -> None:  # as the store's own connections
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA busy_timeout=2000")

    return ours, AlchemyRunner(engine, SQLITE)


def postgres_pair(url: str) -> tuple[Runner, Runner, Callable[[], None]]:
    import psycopg
    from sqlalchemy import create_engine

    from shared.stores.postgres import postgres_store
    from shared.stores.postgres.schema import upgrade
    from shared.stores.postgres.statements import PostgresRunner

    schema = f"bench_sql_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        upgrade(conn, schema)
    store = postgres_store(url, schema=schema)
    engine = create_engine(
        url.replace("postgresql://", "postgresql+psycopg://", 1),
        connect_args={"options": f"-csearch_path={schema}"},
        # One statement an op, as the store's autocommit connections run it:
        # no BEGIN and COMMIT round trips around it.
        isolation_level="AUTOCOMMIT",
    )

    def drop() -> None:
        store.close()
        engine.dispose()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")

    return PostgresRunner(store.statements), AlchemyRunner(engine, POSTGRESQL), drop


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    try:
        import sqlalchemy
    except ImportError:
        sys.exit("bench/sql_layer.py needs SQLAlchemy, its peer: pip install sqlalchemy")
    print(f"SQLAlchemy {sqlalchemy.__version__}; {args.ops} ops (a read and a swap) a run")
    with tempfile.TemporaryDirectory() as folder:
        lite = sqlite_pair(Path(folder))
        ours_pg, alchemy_pg, drop = postgres_pair(args.postgres)
        try:
            for round_ in range(1, args.rounds + 1):
                for name, (ours, alchemy) in (
                    ("SQLite", lite),
                    ("PostgreSQL", (ours_pg, alchemy_pg)),
                ):
                    timed(ours, 50), timed(alchemy, 50)  # warm: connections, statements
                    a = timed(ours, args.ops)
                    b = timed(alchemy, args.ops)
                    print(
                        f"round {round_} {name:10}  DB-API {a:8.0f} ops/s"
                        f"  SQLAlchemy Core {b:8.0f} ops/s  ratio {b / a:.2f}x"
                    )
        finally:
            drop()


if __name__ == "__main__":
    main()
