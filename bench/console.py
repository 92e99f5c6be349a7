"""What the task console costs the server, at 1,000 and 100,000 stored tasks.

    python3 bench/console.py [--max 100000] [--file-max 100000] [--budget 3]

The console (web/console/views.py) asks only ListTasks of the server for its list:

- **a load** (opening the list, or a refresh after a change): the newest
  task (pageSize 1), one page of 25, and one count per state (pageSize 1,
  read `totalSize`): 10 ListTasks;
- **an idle poll** (every 3 s while a list is visible): one ListTasks of
  pageSize 1 with `statusTimestampAfter` the newest task's time, which finds
  nothing when nothing changed.

Each is timed (p50) through `web.core.listing.list_tasks` on Redis (a private
redis-server), on the memory store and on the file store, all of which read
only the page (sorted sets; ordered indexes in process; the same indexes
fed by the file store's log of positions). The file store's tasks are
written without fsync (a listing syncs nothing, and 100,000 synced creates
take many minutes); --file-max bounds its count apart. Ratios between task
counts are what to compare across machines.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
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
    ask(store, {"pageSize": 1, "historyLength": 0})
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
                store, stored, figures = stores.make(kind, fsync=NO), 0, {}
                counts = (1_000, larger)
                for count in counts:
                    fill(store, count - stored)
                    stored = count
                    figures[count] = (
                        p50_ms(lambda store=store: load(store), args.budget),
                        p50_ms(idle_poll(store), args.budget),
                    )
                    loaded, polled = figures[count]
                    print(
                        f"{kind:<7} {count:>7,} tasks: load p50 {loaded:8.2f} ms"
                        f"  idle poll p50 {polled:8.2f} ms"
                    )
                (small_load, small_poll), (big_load, big_poll) = figures.values()
                print(
                    f"{kind:<7} {counts[1]:,} / {counts[0]:,}: load {big_load / small_load:.2f}x,"
                    f" idle poll {big_poll / small_poll:.2f}x"
                )
    finally:
        server.close()


if __name__ == "__main__":
    main()
