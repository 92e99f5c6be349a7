"""Store costs beside raw baselines measured in the same run.

    python3 bench/stores.py [--ops 5000] [--commits 200] [--chunks 1000]
                            [--list-max 100000] [--quick] [--listing-only]
                            [--postgres postgresql://postgres@127.0.0.1:5432/postgres]

For the memory, file and Redis stores (Redis: a private redis-server), and
the SQLite and PostgreSQL stores for ListTasks (PostgreSQL: `--postgres`,
a schema of the run's own on it):

1. save+get pairs per second, next to the cheapest raw thing that does the
   same job (a dict; write+fsync+rename and read; redis-py SET+GET).
2. Commit (compare-and-append) time for a task built from a 1 KB and from a
   1 MB message: `shared.transitions.transition` of a working -> working
   progress event, as a worker saves progress (it passes the record of its
   last write, so nothing is read first). p50 is one append; the mean also
   carries the whole-task snapshot a store writes every SNAPSHOT_EVERY
   events. Issue 9's aim: the 1 MB commit within 2x of the 1 KB one.
3. A chatty generator: N tiny artifact chunks appended to one task through
   `transition`, beside the naive way in the same run: fold the chunk into
   the task and rewrite it whole with `store.save`. Time, and bytes written
   (file: this process's write() bytes from /proc/self/io; Redis: the bytes
   the server received, from INFO; memory writes no bytes).
4. ListTasks, one default page (50 tasks, newest first) through
   `web.core.listing.list_tasks`, p50 at 200, 1,000, 10,000, 20,000 and 100,000 stored tasks
   (created through the store, so whatever indexes it keeps are built as in
   service). Every store goes to --list-max; the file store's tasks are
   written without fsync (`TOOLNEXUS_FILE_FSYNC=no`: a listing reads and
   syncs nothing, and 100,000 synced creates take many minutes). The
   aims: p50 at 100,000 <= 1.5x p50 at 1,000; at 20,000 <= 2x at 200.
5. The Redis stale query (the reaper's) over the 100,000 tasks of 4, with
   1,000 live working tasks and 10 stale ones, beside a PING.

`--listing-only` runs 4 alone.

Ratios, not absolute numbers, are what to compare across machines:
everything here shares one noisy box.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from bench.processes import exit_on_sigterm, percentile
from shared.events import artifact_update, fold, status_update, to_state
from shared.store.contract import TaskStore
from shared.store.spec import ALWAYS, NO
from shared.stores.file.store import file_store
from shared.stores.memory.store import memory_store
from shared.stores.redis.store import redis_store
from shared.stores.sqlite.store import sqlite_store
from shared.task import WORKING, agent_message, new_task, text_message, text_part
from shared.transitions import SNAPSHOT_EVERY, transition
from tests.support.redis_server import RedisServer
from web.core.listing import list_tasks
from web.core.params import list_query

KB, MB = 1024, 1024 * 1024


def rate(ops: int, body: Callable[[int], None]) -> float:
    """Operations per second of `body(i)`, best of three rounds."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for i in range(ops):
            body(i)
        best = min(best, time.perf_counter() - start)
    return ops / best


def tasks(ops: int) -> list[Any]:
    return [new_task(text_message("user", f"benchmark task {i}")) for i in range(ops)]


# --- the stores ------------------------------------------------------------------------


class Stores:
    """One store of each kind, each with a way to count the bytes it wrote."""

    def __init__(
        self, folder: Path, redis_url: str, clock: Callable[[], float], postgres_url: str
    ) -> None:
        self.folder = folder
        self.redis_url = redis_url
        self.clock = clock
        self.client = redis.Redis.from_url(redis_url)
        self.postgres_url = postgres_url
        self.schemas: list[str] = []  # the PostgreSQL schemas made, dropped by `close`
        self._made = 0

    def make(self, kind: str, *, fsync: str = ALWAYS) -> TaskStore:
        """A fresh, empty store of `kind` (`fsync`: the file store's policy)."""
        self._made += 1
        if kind == "memory":
            return memory_store(clock=self.clock)
        if kind == "file":
            return file_store(self.folder / f"store{self._made}", clock=self.clock, fsync=fsync)
        if kind == "sqlite":
            path = self.folder / f"store{self._made}.db"
            return sqlite_store(path, clock=self.clock, fsync=fsync == ALWAYS)
        if kind == "postgres":
            return self._postgres()
        return redis_store(self.redis_url, prefix=f"s{self._made}:", clock=self.clock)

    def _postgres(self) -> TaskStore:
        """A store on a fresh, migrated schema of the machine's PostgreSQL."""
        import psycopg

        from shared.stores.postgres import postgres_store
        from shared.stores.postgres.schema import upgrade

        schema = f"bench_stores_{os.getpid()}_{self._made}"
        with psycopg.connect(self.postgres_url, autocommit=True) as conn:
            upgrade(conn, schema)
        self.schemas.append(schema)
        return postgres_store(self.postgres_url, schema=schema, clock=self.clock)

    def vacuum(self, store: TaskStore) -> None:
        import psycopg

        with psycopg.connect(self.postgres_url, autocommit=True) as conn:
            for table in ("tasks", "history", "events"):
                conn.execute(f"VACUUM ANALYZE {store.schema}.{table}")  # type: ignore[attr-defined]

    def close(self) -> None:
        if not self.schemas:
            return
        import psycopg

        with psycopg.connect(self.postgres_url, autocommit=True) as conn:
            for schema in self.schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

    @contextmanager
    def written(self, kind: str) -> Iterator[list[int]]:
        """Yields a list that holds, after the block, the bytes `kind` wrote in it."""
        found: list[int] = []
        before = self._bytes(kind)
        yield found
        after = self._bytes(kind)
        found.append(after - before if after >= 0 else -1)

    def _bytes(self, kind: str) -> int:
        if kind == "file":
            for line in Path("/proc/self/io").read_text().splitlines():
                if line.startswith("wchar:"):
                    return int(line.split()[1])
        if kind == "redis":
            return int(self.client.info("stats")["total_net_input_bytes"])
        return -1


KINDS = ("memory", "file", "redis")
# ListTasks is measured on every kind.
LISTED = ("memory", "file", "sqlite", "redis", "postgres")


# --- 1. save+get -----------------------------------------------------------------------


def report_pairs(name: str, ours: float, baseline: float, baseline_name: str) -> None:
    print(
        f"  {name:<8} {ours:>10,.0f} save+get/s   {baseline_name:<24} {baseline:>10,.0f}/s"
        f"   ratio {ours / baseline:.2f}x"
    )


def bench_pairs(stores: Stores, ops: int) -> None:
    print(f"\n1. save+get pairs per second (best of 3 rounds of {ops}; file: {ops // 5})")
    memory, raw = stores.make("memory"), {}
    batch = tasks(ops)

    def memory_pair(i: int) -> None:
        memory.save(batch[i])
        memory.get(batch[i]["id"])

    def dict_pair(i: int) -> None:
        raw[batch[i]["id"]] = batch[i]
        raw.get(batch[i]["id"])

    report_pairs("memory", rate(ops, memory_pair), rate(ops, dict_pair), "dict set+get")

    files, folder = stores.make("file"), stores.folder / "raw"
    folder.mkdir()
    few = max(ops // 5, 100)

    def file_pair(i: int) -> None:
        files.save(batch[i])
        files.get(batch[i]["id"])

    def raw_file_pair(i: int) -> None:
        target, temp = folder / f"{batch[i]['id']}.json", folder / f".{i}.tmp"
        with open(temp, "wb") as file:
            file.write(json.dumps(batch[i]).encode())
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, target)
        json.loads(target.read_bytes())

    report_pairs("file", rate(few, file_pair), rate(few, raw_file_pair), "write+fsync+rename+read")

    store, client = stores.make("redis"), stores.client

    def redis_pair(i: int) -> None:
        store.save(batch[i])
        store.get(batch[i]["id"])

    def raw_redis_pair(i: int) -> None:
        client.set(f"raw:{batch[i]['id']}", json.dumps(batch[i]))
        json.loads(client.get(f"raw:{batch[i]['id']}"))  # type: ignore[arg-type]

    report_pairs("redis", rate(ops, redis_pair), rate(ops, raw_redis_pair), "redis-py SET+GET")


# --- 2. commit time by task size -------------------------------------------------------


def create(store: TaskStore, task: Any) -> None:
    """Save a new task as a send does: `create` with a fresh message key.
    A store whose `create` hangs (see `creating_hangs`) gets `save` instead."""
    if HANGS.get(type(store).__name__):
        store.save(task)
    else:
        store.create(task, uuid.uuid4().hex)  # type: ignore[attr-defined]


def creating_hangs(kind: str, stores: Stores) -> bool:
    """Whether `create` of a store of `kind` fails to return within 5 s (in a
    throwaway store: a hung call may keep holding that store's locks)."""
    probe = stores.make(kind)
    done = threading.Event()

    def attempt() -> None:
        for _ in range(200):  # enough to meet any per-key lock collision
            probe.create(new_task(text_message("user", "probe")), uuid.uuid4().hex)  # type: ignore[attr-defined]
            probe.create(new_task(text_message("user", "probe")))  # type: ignore[attr-defined]
        done.set()

    threading.Thread(target=attempt, daemon=True).start()
    hung = not done.wait(5.0)
    HANGS[type(probe).__name__] = hung
    if hung:
        print(
            f"NOTE: the {kind} store's create() did not return within 5 s (a server bug);"
            " this run stores its new tasks with save() instead"
        )
    return hung


HANGS: dict[str, bool] = {}


def working_task(store: TaskStore, size: int) -> Any:
    """A task built from a message of `size` bytes of text, claimed (working)."""
    task = new_task(text_message("user", "x" * size))
    create(store, task)
    claimed = transition(store, task["id"], to_state(WORKING))
    assert claimed.applied and claimed.record is not None
    return claimed.record


def progress(number: int) -> Any:
    message = agent_message(f"progress {number}")
    return lambda task: [status_update(task, WORKING, message)]


def commit_times(store: TaskStore, size: int, commits: int) -> list[float]:
    record = working_task(store, size)
    times = []
    for number in range(commits):
        start = time.perf_counter()
        outcome = transition(
            store, record.task["id"], progress(number), from_states={WORKING}, current=record
        )
        times.append(time.perf_counter() - start)
        assert outcome.applied and outcome.record is not None, "a progress commit was refused"
        record = outcome.record
    return times


def bench_commits(stores: Stores, commits: int) -> None:
    print(
        f"\n2. commit (compare-and-append) of a progress event, {commits} commits per task;"
        f" mean includes a snapshot every {SNAPSHOT_EVERY} events"
    )
    for kind in KINDS:
        figures = {}
        for size in (KB, MB):
            times = commit_times(stores.make(kind), size, commits)
            figures[size] = (statistics.median(times) * 1e3, statistics.fmean(times) * 1e3)
        (small_p50, small_mean), (large_p50, large_mean) = figures[KB], figures[MB]
        p50_ratio, mean_ratio = large_p50 / small_p50, large_mean / small_mean
        print(
            f"  {kind:<7} 1 KB: p50 {small_p50:7.3f} ms, mean {small_mean:7.3f} ms"
            f"   1 MB: p50 {large_p50:7.3f} ms, mean {large_mean:7.3f} ms"
            f"   1 MB / 1 KB: p50 {p50_ratio:.2f}x, mean {mean_ratio:.2f}x"
            f"   aim <= 2x: p50 {_verdict(p50_ratio <= 2)}, mean {_verdict(mean_ratio <= 2)}"
        )


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


# --- 3. chatty generator ---------------------------------------------------------------


def chunk_event(task: Any, number: int, last: bool) -> Any:
    artifact = {"artifactId": "chatty", "name": "chatty", "parts": [text_part(f"chunk {number} ")]}
    return artifact_update(task, artifact, append=number > 0, last_chunk=last)  # type: ignore[arg-type]


def chatty_transitions(store: TaskStore, chunks: int) -> None:
    record = working_task(store, 100)
    for number in range(chunks):
        last = number == chunks - 1
        outcome = transition(
            store,
            record.task["id"],
            lambda task, n=number, end=last: [chunk_event(task, n, end)],
            from_states={WORKING},
            current=record,
        )
        assert outcome.applied and outcome.record is not None
        record = outcome.record
    _check_chunks(store, record.task["id"], chunks)


def chatty_rewrites(store: TaskStore, chunks: int) -> None:
    task = working_task(store, 100).task
    for number in range(chunks):
        task = store.save(fold(task, [chunk_event(task, number, number == chunks - 1)]))
    _check_chunks(store, task["id"], chunks)


def _check_chunks(store: TaskStore, task_id: str, chunks: int) -> None:
    stored = store.read(task_id)
    assert stored is not None
    parts = stored.task["artifacts"][0]["parts"]
    assert len(parts) == chunks, f"{len(parts)} of {chunks} chunks stored"


def bench_chatty(stores: Stores, chunks: int) -> None:
    print(f"\n3. a chatty generator: {chunks} tiny artifact chunks appended to one task")
    for kind in KINDS:
        figures = []
        for way in (chatty_transitions, chatty_rewrites):
            store = stores.make(kind)
            with stores.written(kind) as written:
                start = time.perf_counter()
                way(store, chunks)
                seconds = time.perf_counter() - start
            figures.append((seconds, written[0]))
        (ours, ours_bytes), (naive, naive_bytes) = figures
        line = (
            f"  {kind:<7} transition: {ours * 1e3:8.1f} ms"
            f"   rewrite whole task (save): {naive * 1e3:8.1f} ms   time {ours / naive:.2f}x"
        )
        if ours_bytes >= 0:
            line += (
                f"   bytes written {ours_bytes / KB:,.0f} KiB vs {naive_bytes / KB:,.0f} KiB"
                f" ({ours_bytes / naive_bytes:.2f}x)"
            )
        print(line)


# --- 4. ListTasks ----------------------------------------------------------------------


def fill(store: TaskStore, count: int) -> None:
    for number in range(count):
        create(store, new_task(text_message("user", f"listed task {number}")))


def list_p50(store: TaskStore, budget: float, most: int = 20) -> tuple[float, int]:
    """p50 of one default ListTasks page: at least 3 calls, then until `most`
    calls or `budget` seconds; (p50 in ms, calls made)."""
    query = list_query({})
    times: list[float] = []
    began = time.perf_counter()
    while len(times) < 3 or (len(times) < most and time.perf_counter() - began < budget):
        start = time.perf_counter()
        page = list_tasks(store, query, "")
        times.append(time.perf_counter() - start)
        assert len(page.tasks) == min(query.page_size, page.total_size)
    return percentile(times, 0.5) * 1e3, len(times)


def bench_listing(stores: Stores, list_max: int, budget: float) -> tuple[TaskStore, int]:
    """The figures; and the Redis store, filled, with its task count."""
    counts = [count for count in (200, 1_000, 10_000, 20_000, 100_000) if count <= list_max]
    print(f"\n4. ListTasks, one default page, p50 (at most {budget:g} s of calls per figure)")
    kept: tuple[TaskStore, int] | None = None
    for kind in LISTED:
        store = stores.make(kind, fsync=NO)
        stored, figures = 0, {}
        for count in counts:
            start = time.perf_counter()
            fill(store, count - stored)
            filled, added, stored = time.perf_counter() - start, count - stored, count
            figures[count], calls = list_p50(store, budget)
            print(
                f"  {kind:<7} {count:>7,} tasks: p50 {figures[count]:9.2f} ms"
                f"   ({calls} calls; {added:,} tasks created in {filled:.1f} s)"
            )
        largest = max(figures)
        if largest != counts[0]:
            ratio = figures[largest] / figures[counts[0]]
            aim = f"   aim <= 1.5x: {_verdict(ratio <= 1.5)}" if largest == 100_000 else ""
            aim = f"   aim <= 2x: {_verdict(ratio <= 2)}" if largest == 20_000 else aim
            print(f"  {kind:<7} p50 at {largest:,} / p50 at {counts[0]:,}: {ratio:.2f}x{aim}")
        if kind == "postgres":
            # Autovacuum comes in its own time: the page once the tables are vacuumed.
            stores.vacuum(store)
            after, calls = list_p50(store, budget)
            print(f"  {kind:<7} {stored:>7,} tasks, after VACUUM ANALYZE: p50 {after:9.2f} ms")
        if kind == "redis":
            kept = (store, stored)
    assert kept is not None
    return kept


# --- 5. the stale query ----------------------------------------------------------------


def bench_stale_query(
    store: TaskStore, stored: int, clock: list[float], client: redis.Redis
) -> None:
    clock[0] = 1_000.0
    for _ in range(10):
        working_task(store, 10)
    clock[0] = 5_000.0
    for _ in range(1_000):  # live tasks, not stale: the query must skip them without reading
        working_task(store, 10)
    timings = []
    for _ in range(200):
        start = time.perf_counter()
        found = store.stale(2_000.0)  # type: ignore[attr-defined]
        timings.append(time.perf_counter() - start)
    assert len(found) == 10, found
    ping = []
    for _ in range(200):
        start = time.perf_counter()
        client.ping()
        ping.append(time.perf_counter() - start)
    query_ms, ping_ms = statistics.median(timings) * 1e3, statistics.median(ping) * 1e3
    print(
        f"\n5. stale query over {stored:,} submitted + 1,000 live + 10 stale tasks:"
        f" median {query_ms:.3f} ms (a PING: {ping_ms:.3f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=5_000, help="save+get pairs per round")
    parser.add_argument("--commits", type=int, default=200, help="commits per task size")
    parser.add_argument("--chunks", type=int, default=1_000, help="chunks of the chatty task")
    parser.add_argument(
        "--list-max", type=int, default=100_000, help="most stored tasks for ListTasks"
    )
    parser.add_argument(
        "--list-budget", type=float, default=20.0, help="seconds of ListTasks calls per figure"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: fewer of everything, ListTasks to 10,000"
    )
    parser.add_argument("--listing-only", action="store_true", help="only the ListTasks figures")
    parser.add_argument(
        "--postgres",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL for ListTasks (each run migrates schemas of its own, dropped after)",
    )
    args = parser.parse_args()
    exit_on_sigterm()
    if args.quick:
        args.ops, args.commits, args.chunks, args.list_max, args.list_budget = (
            500,
            64,
            200,
            10_000,
            3.0,
        )
    server = RedisServer().start()
    clock = [0.0]  # 0: the real time; the stale query sets it
    try:
        with tempfile.TemporaryDirectory() as folder:
            stores = Stores(
                Path(folder), f"{server.url}/0", lambda: clock[0] or time.time(), args.postgres
            )
            try:
                for kind in KINDS:
                    creating_hangs(kind, stores)
                if args.listing_only:
                    bench_listing(stores, args.list_max, args.list_budget)
                    return
                bench_pairs(stores, args.ops)
                bench_commits(stores, args.commits)
                bench_chatty(stores, args.chunks)
                listed, stored = bench_listing(stores, args.list_max, args.list_budget)
                bench_stale_query(listed, stored, clock, stores.client)
            finally:
                stores.close()
    finally:
        server.close()


if __name__ == "__main__":
    main()
