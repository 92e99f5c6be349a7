"""Store throughput beside raw baselines measured in the same run.

    python3 bench/stores.py [--ops 5000]

For each store: save+get pairs per second, next to the cheapest raw thing
that does the same job (a dict; write+fsync+rename and read; redis-py
SET+GET), printed as a ratio. Then the Redis stale query over 100,000
finished tasks and 10 stale ones. Ratios, not absolute numbers, are what
to compare across machines: everything here shares one noisy box.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from shared.file_store import file_store
from shared.memory_store import memory_store
from shared.redis_store import redis_store
from shared.task import COMPLETED, WORKING, new_task, text_message, with_status
from tests.support.redis_server import RedisServer


def rate(ops: int, body: Callable[[int], None]) -> float:
    """Operations per second of `body(i)`, best of three rounds."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for i in range(ops):
            body(i)
        best = min(best, time.perf_counter() - start)
    return ops / best


def tasks(ops: int) -> list[dict[str, object]]:
    return [new_task(text_message("user", f"benchmark task {i}")) for i in range(ops)]


def report(name: str, ours: float, baseline: float, baseline_name: str) -> None:
    print(
        f"{name:<8} {ours:>10,.0f} save+get/s   {baseline_name:<22} {baseline:>10,.0f}/s"
        f"   ratio {ours / baseline:.2f}x"
    )


def bench_memory(ops: int) -> None:
    store, raw = memory_store(), {}
    batch = tasks(ops)

    def ours(i: int) -> None:
        store.save(batch[i])
        store.get(batch[i]["id"])  # type: ignore[arg-type]

    def baseline(i: int) -> None:
        raw[batch[i]["id"]] = batch[i]
        raw.get(batch[i]["id"])

    report("memory", rate(ops, ours), rate(ops, baseline), "dict set+get")


def bench_file(ops: int) -> None:
    with tempfile.TemporaryDirectory() as ours_dir, tempfile.TemporaryDirectory() as raw_dir:
        store, folder = file_store(ours_dir), Path(raw_dir)
        batch = tasks(ops)

        def ours(i: int) -> None:
            store.save(batch[i])
            store.get(batch[i]["id"])  # type: ignore[arg-type]

        def baseline(i: int) -> None:
            target, temp = folder / f"{batch[i]['id']}.json", folder / f".{i}.tmp"
            with open(temp, "wb") as file:
                file.write(json.dumps(batch[i]).encode())
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp, target)
            json.loads(target.read_bytes())

        report("file", rate(ops, ours), rate(ops, baseline), "write+fsync+rename+read")


def bench_redis(ops: int, url: str) -> None:
    store, client = redis_store(url), redis.Redis.from_url(url)
    batch = tasks(ops)

    def ours(i: int) -> None:
        store.save(batch[i])
        store.get(batch[i]["id"])  # type: ignore[arg-type]

    def baseline(i: int) -> None:
        client.set(f"raw:{batch[i]['id']}", json.dumps(batch[i]))
        json.loads(client.get(f"raw:{batch[i]['id']}"))  # type: ignore[arg-type]

    report("redis", rate(ops, ours), rate(ops, baseline), "redis-py SET+GET")


def bench_stale_query(url: str) -> None:
    clock = [1_000.0]
    store = redis_store(url, prefix="stale:", clock=lambda: clock[0])
    client = redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    for n in range(100_000):
        task = with_status(new_task(text_message("user", str(n))), COMPLETED)
        pipe.set(f"stale:task:{task['id']}", json.dumps(task))
        if n % 5_000 == 4_999:
            pipe.execute()
    pipe.execute()
    for _ in range(10):
        store.save(with_status(new_task(text_message("user", "stuck")), WORKING))
    clock[0] = 5_000.0
    for _ in range(1_000):  # live tasks, not stale: the query must skip them without reading
        store.save(with_status(new_task(text_message("user", "alive")), WORKING))
    timings = []
    for _ in range(200):
        start = time.perf_counter()
        found = store.stale(2_000.0)
        timings.append(time.perf_counter() - start)
    assert len(found) == 10, found
    ping = []
    for _ in range(200):
        start = time.perf_counter()
        client.ping()
        ping.append(time.perf_counter() - start)
    query_ms, ping_ms = statistics.median(timings) * 1e3, statistics.median(ping) * 1e3
    print(
        "stale query over 100,000 finished + 1,000 live + 10 stale tasks:"
        f" median {query_ms:.3f} ms (a PING: {ping_ms:.3f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=5_000, help="save+get pairs per round")
    args = parser.parse_args()
    bench_memory(args.ops)
    bench_file(max(args.ops // 5, 100))
    server = RedisServer().start()
    try:
        bench_redis(args.ops, f"{server.url}/0")
        bench_stale_query(f"{server.url}/1")
    finally:
        server.close()


if __name__ == "__main__":
    main()
