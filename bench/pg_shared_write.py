"""Whether PostgreSQL could run the task log's SQL the SQLite store runs,
instead of its own write functions: a progress event appended three ways.

    python3 bench/pg_shared_write.py [--tasks 100] [--ops 3000] [--rounds 2]
                                     [--postgres postgresql://postgres@127.0.0.1:5432/postgres]

- function: the PostgreSQL store's own `commit` (one statement calling
  `write_task`: the compare, the append, the history, the index columns and
  the notification in one round trip), on a schema `db upgrade` made;
- bare function: the same call over one bare connection, as the two paths
  below run theirs (no pool checkout, no deadline set per call);
- statements: the shared task log's write, which the SQLite store runs
  (`TaskLog.write` in `shared.stores.sql.tasks`: the row and the listing
  moment read, the event and its history row inserted, the row updated,
  the history trimmed, the time index placed) in one transaction over
  psycopg, one round trip a statement, and a notification as the function
  sends, on a schema made with the SQLite store's tables;
- pipelined: the same statements in psycopg's pipeline mode: the read
  answered first (the compare needs it), then the rest sent at once.

Each op appends one status update (working, with a message) to one of
`--tasks` tasks, compared against its last event number; no snapshot. The
rounds interleave the three paths (each round in a rotated order); printed:
ops a second for each path and each one's ratio to the function's.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import psycopg

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from shared.codec import encode  # noqa: E402
from shared.events import fold, status_update  # noqa: E402
from shared.indexes import Indexes  # noqa: E402
from shared.store.contract import LOG_LIMIT, Commit  # noqa: E402
from shared.store.time_indexes import TimeIndexes  # noqa: E402
from shared.stores.postgres import schema  # noqa: E402
from shared.stores.postgres.store import PostgresStore, postgres_store  # noqa: E402
from shared.stores.sql.dialects import POSTGRESQL  # noqa: E402
from shared.stores.sql.runner import Transaction  # noqa: E402
from shared.stores.sql.tasks import TaskLog  # noqa: E402
from shared.task import WORKING, Task, epoch, new_task, text_message  # noqa: E402

# The SQLite store's tables, as PostgreSQL spells them (no counts: the
# function's schema keeps them by triggers, so this path does less).
TABLES = (
    "CREATE TABLE tasks (id text PRIMARY KEY, doc text NOT NULL, seq bigint NOT NULL,"
    " base bigint NOT NULL, state text NOT NULL, ts double precision NOT NULL,"
    " owner text NOT NULL, context text NOT NULL, mkey text UNIQUE, expires double precision,"
    " lineage integer NOT NULL DEFAULT 0)",
    "CREATE INDEX tasks_by_owner ON tasks (owner, ts, id, state, expires)",
    "CREATE INDEX tasks_by_context ON tasks (owner, context, ts, id, state, expires)",
    "CREATE INDEX tasks_expiring ON tasks (expires) WHERE expires IS NOT NULL",
    "CREATE TABLE events (task_id text, seq bigint, body text NOT NULL,"
    " PRIMARY KEY (task_id, seq))",
    "CREATE TABLE history (task_id text, seq bigint, ts double precision NOT NULL,"
    " state text NOT NULL, PRIMARY KEY (task_id, seq))",
    "CREATE TABLE times (name text PRIMARY KEY, at double precision NOT NULL)",
    "CREATE TABLE indexes (name text, member text, score double precision NOT NULL,"
    " PRIMARY KEY (name, member))",
    "CREATE INDEX indexes_scored ON indexes (name, score, member)",
)


def progress(task: Task, n: int) -> tuple[Task, Any]:
    event = status_update(task, WORKING, text_message("agent", f"step {n}"))
    return fold(task, [event]), event


class Statements:
    """The shared task log's write (`shared.stores.sql.tasks`) of one
    appended event, over psycopg, and a notification as the function sends."""

    def __init__(self, url: str, name: str, tasks: list[Task], pipelined: bool) -> None:
        self._conn = psycopg.connect(url, autocommit=True)
        self._conn.execute(f"SET search_path TO {name}")
        self._pipelined = pipelined
        self._log = TaskLog(0.0, LOG_LIMIT, TimeIndexes(cast(Indexes, None)).scores)
        self.tasks = {task["id"]: (task, 1) for task in tasks}

    def append(self, task_id: str, n: int) -> None:
        task, seq = self.tasks[task_id]
        task, event = progress(task, n)
        conn = self._conn
        with conn.transaction(), conn.cursor() as cursor:
            if self._pipelined:
                with conn.pipeline():
                    self._write(cursor, task, event, seq)
            else:
                self._write(cursor, task, event, seq)
        self.tasks[task_id] = (task, seq + 1)

    def _write(self, cursor: psycopg.Cursor[Any], task: Task, event: Any, seq: int) -> None:
        t = Transaction(cursor, POSTGRESQL)
        record = self._log.write(t, time.time(), task, [event], seq, False)
        assert record is not None and record.seq == seq + 1
        t.one("SELECT pg_notify('events', :id)", {"id": task["id"]})

    def close(self) -> None:
        self._conn.close()


class _Bare:
    """The store's statements run on one bare connection."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def one(self, query: Any, args: Any) -> Any:
        return self._conn.execute(query, args, prepare=True).fetchone()


def appender(
    creator: PostgresStore, writer: PostgresStore, count: int
) -> tuple[Callable[[str, int], None], list[str]]:
    """`count` new tasks (made through `creator`), and an append of one
    progress event to one of them through `writer`'s `commit`."""
    tasks: dict[str, tuple[Task, int]] = {}
    for _ in range(count):
        created = creator.create(new_task(text_message("user", "bench"))).task
        tasks[created["id"]] = (created, 1)

    def append(task_id: str, n: int) -> None:
        task, seq = tasks[task_id]
        task, event = progress(task, n)
        assert writer.commit(Commit(task, [event], seq, False))
        tasks[task_id] = (task, seq + 1)

    return append, list(tasks)


def made_schema(url: str, migrated: bool) -> str:
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        if migrated:
            schema.upgrade(conn, name)
        else:
            conn.execute(f"CREATE SCHEMA {name}")
            conn.execute(f"SET search_path TO {name}")
            for statement in TABLES:
                conn.execute(statement)
    return name


def seeded(url: str, name: str, tasks: list[Task]) -> None:
    """The tasks as the SQLite store's tables hold them just after a create."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {name}")
        for task in tasks:
            ts = epoch(task["status"]["timestamp"])
            conn.execute(
                "INSERT INTO tasks VALUES (%s, %s, 1, 1, 'submitted', %s, '', %s, NULL, NULL, 0)",
                (task["id"], encode(task), ts, task["contextId"]),
            )
            conn.execute("INSERT INTO history VALUES (%s, 1, %s, 'submitted')", (task["id"], ts))
            conn.execute("INSERT INTO indexes VALUES ('waiting', %s, %s)", (task["id"], ts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    options = parser.parse_args()
    url = options.postgres
    made: list[str] = []
    try:
        fn_schema = made_schema(url, migrated=True)
        made.append(fn_schema)
        store = postgres_store(f"{url}?schema={fn_schema}")
        function_append, function_ids = appender(store, store, options.tasks)
        # The same function called over a bare connection, as the statements
        # paths run theirs: no pool, no deadline set per call.
        bare = psycopg.connect(url, autocommit=True)
        bare.execute(f"SET search_path TO {fn_schema}")
        bare_store = postgres_store(f"{url}?schema={fn_schema}")
        bare_store.statements = _Bare(bare)  # type: ignore[assignment]
        bare_append, bare_ids = appender(store, bare_store, options.tasks)

        paths: dict[str, tuple[Callable[[str, int], None], list[str]]] = {
            "function": (function_append, function_ids),
            "bare function": (bare_append, bare_ids),
        }
        for pipelined in (False, True):
            name = made_schema(url, migrated=False)
            made.append(name)
            tasks = [new_task(text_message("user", "bench")) for _ in range(options.tasks)]
            seeded(url, name, tasks)
            writer = Statements(url, name, tasks, pipelined)
            paths["pipelined" if pipelined else "statements"] = (writer.append, list(writer.tasks))

        rates: dict[str, list[float]] = {path: [] for path in paths}
        order = list(paths)
        numbers = itertools.count()
        for round_ in range(options.rounds):
            for path in order[round_ % len(order) :] + order[: round_ % len(order)]:
                append, ids = paths[path]
                started = time.perf_counter()
                for op in range(options.ops):
                    append(ids[op % len(ids)], next(numbers))
                rates[path].append(options.ops / (time.perf_counter() - started))
            shown = ", ".join(f"{path} {rates[path][-1]:,.0f} ops/s" for path in paths)
            against = ", ".join(
                f"{path}/function {rates[path][-1] / rates['function'][-1]:.2f}x"
                for path in paths
                if path != "function"
            )
            print(f"round {round_ + 1}: {shown}; {against}", flush=True)
        for path in paths:
            if path != "function":
                ratios = [a / b for a, b in zip(rates[path], rates["function"], strict=True)]
                print(
                    f"{path}/function, median of {options.rounds}: {statistics.median(ratios):.2f}x"
                )
        store.close()
        bare.close()
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            for name in made:
                conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


if __name__ == "__main__":
    main()
