"""What the task console costs the server, at 1,000 and 100,000 stored tasks.

    python3 bench/console.py [--max 100000] [--file-max 100000] [--budget 3]
                             [--postgres postgresql://postgres@127.0.0.1:5432/postgres]

The console (web/console/views.py) asks only ListTasks of the server for its list:

- **a load** (opening the list, or a refresh after a change): one page of
  25 (whose first task is the newest, what the idle poll asks after), and
  one count per state (pageSize 1, read `totalSize`): 9 ListTasks;
- **an idle poll** (every 3 s while a list is visible): one ListTasks of
  pageSize 1 with `statusTimestampAfter` the newest task's time, which finds
  nothing when nothing changed.

Each is timed (p50) through `web.core.listing.list_tasks` on Redis (a private
redis-server), on the memory store and on the file store, all of which read
only the page (sorted sets; ordered indexes in process; the same indexes
fed by the file store's log of positions), and with --postgres on
PostgreSQL too, in a schema of its own dropped afterwards (it lists from
its indexes, a statement a page; each count is timed straight after the
fill and again after a VACUUM ANALYZE, which autovacuum runs on its own
within minutes of such a fill, and which the counts' index-only scans
need). The file store's tasks are written without fsync (a listing syncs
nothing, and 100,000 synced creates take many minutes); --file-max bounds
its count apart. Ratios between task counts are what to compare across
machines.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stores import Stores, fill, percentile
from shared.store.contract import TaskStore
from shared.store.spec import NO
from shared.task import STATES
from tests.support.redis_server import RedisServer
from web.core.listing import list_tasks
from web.core.params import list_query

PAGE = 25


def ask(store: TaskStore, params: dict[str, Any]) -> Any:
    return list_tasks(store, list_query(params), "")


def load(store: TaskStore) -> None:
    page = ask(store, {"pageSize": PAGE})
    assert len(page.tasks) == min(PAGE, page.total_size)
    for state in sorted(STATES):
        ask(store, {"status": state, "pageSize": 1, "historyLength": 0})


def idle_poll(store: TaskStore) -> Callable[[], None]:
    newest = ask(store, {"pageSize": 1, "historyLength": 0}).tasks[0]["status"]["timestamp"]

    def poll() -> None:
        changed = ask(store, {"pageSize": 1, "historyLength": 0, "statusTimestampAfter": newest})
        assert changed.tasks == []

    return poll


@contextmanager
def postgres_schema(url: str) -> Iterator[str]:
    """A store URL on a schema of its own, dropped afterwards."""
    import psycopg

    from shared.stores.postgres import schema

    name = f"bench_console_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as connection:
        schema.upgrade(connection, name)
    try:
        yield f"{url}{'&' if '?' in url else '?'}schema={name}"
    finally:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def measure(
    kind: str,
    store: TaskStore,
    counts: tuple[int, int],
    budget: float,
    settle: Callable[[], None] | None = None,
) -> None:
    """Fill `store` to each count and time a load and an idle poll there;
    with `settle`, again after it (PostgreSQL's VACUUM ANALYZE)."""
    stored, figures = 0, {}
    for count in counts:
        fill(store, count - stored)
        stored = count
        rounds = [kind] if settle is None else [f"{kind} (filled)", f"{kind} (vacuumed)"]
        for label in rounds:
            if label.endswith("(vacuumed)") and settle is not None:
                settle()
            figures[count] = (
                p50_ms(lambda: load(store), budget),
                p50_ms(idle_poll(store), budget),
            )
            loaded, polled = figures[count]
            print(
                f"{label:<19} {count:>7,} tasks: load p50 {loaded:8.2f} ms"
                f"  idle poll p50 {polled:8.2f} ms",
                flush=True,
            )
    (small_load, small_poll), (big_load, big_poll) = figures.values()
    print(
        f"{kind:<19} {counts[1]:,} / {counts[0]:,}: load {big_load / small_load:.2f}x,"
        f" idle poll {big_poll / small_poll:.2f}x",
        flush=True,
    )


def p50_ms(body: Callable[[], None], budget: float, most: int = 50) -> float:
    times: list[float] = []
    began = time.perf_counter()
    while len(times) < 3 or (len(times) < most and time.perf_counter() - began < budget):
        start = time.perf_counter()
        body()
        times.append(time.perf_counter() - start)
    return percentile(times, 0.5) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", type=int, default=100_000, help="the larger task count")
    parser.add_argument("--file-max", type=int, default=None, help="the file store's (--max)")
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of calls per figure")
    parser.add_argument("--postgres", help="a PostgreSQL server URL: measure it too")
    args = parser.parse_args()
    server = RedisServer().start()
    try:
        with tempfile.TemporaryDirectory() as folder:
            stores = Stores(Path(folder), server.url + "/0", time.time)
            for kind, larger in (
                ("redis", args.max),
                ("memory", args.max),
                ("file", args.max if args.file_max is None else args.file_max),
            ):
                measure(kind, stores.make(kind, fsync=NO), (1_000, larger), args.budget)
    finally:
        server.close()
    if args.postgres:
        from shared.stores.postgres import postgres_store

        with postgres_schema(args.postgres) as url:
            store = postgres_store(url)

            def vacuum() -> None:
                import psycopg

                with psycopg.connect(url.partition("?")[0], autocommit=True) as connection:
                    schema_name = url.rpartition("schema=")[2]
                    for table in ("tasks", "history", "events"):
                        connection.execute(f"VACUUM (ANALYZE) {schema_name}.{table}")

            try:
                measure("postgres", store, (1_000, args.max), args.budget, vacuum)
            finally:
                store.close()


if __name__ == "__main__":
    main()
