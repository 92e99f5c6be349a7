"""What NOTIFY costs the PostgreSQL store's writes under heavy write load.

    python3 bench/postgres_notify.py [--url postgresql://postgres@127.0.0.1:5432/postgres]
                                     [--writers 16] [--seconds 5] [--rounds 3]

`--writers` threads, each with its own connection slot, append events to
their own tasks (one commit each, as a streamed chunk is) for `--seconds`,
first with the writes' NOTIFY on, then off (TOOLNEXUS_PG_NOTIFY=false),
interleaved over `--rounds`, in a schema of its own (dropped afterwards).
A notifying commit queues its notice under a database-wide lock, so the
commits of every writer serialise there; the ratio says what that costs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from shared.events import artifact_update
from shared.store.contract import Commit
from shared.stores.postgres import postgres_store, schema
from shared.task import new_task, text_message


def rate(url: str, notify: bool, writers: int, seconds: float) -> float:
    store = postgres_store(url, notify=notify, connections=writers)
    tasks = [store.create(new_task(text_message("user", "x"))).task for _ in range(writers)]
    done = [0] * writers
    stop = time.monotonic() + seconds
    artifact = {"artifactId": "a", "parts": [{"kind": "text", "text": "chunk"}]}

    def write(index: int) -> None:
        task, seq = tasks[index], 1
        while time.monotonic() < stop:
            event = artifact_update(task, artifact, append=True, last_chunk=False)  # type: ignore[arg-type]
            assert store.commit(Commit(task, [event], seq, snapshot=False))
            seq += 1
            done[index] += 1

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.close()
    return sum(done) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    name = f"bench_notify_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(args.url, autocommit=True) as conn:
        schema.upgrade(conn, name)
    url = f"{args.url}{'&' if '?' in args.url else '?'}schema={name}"
    rates: dict[bool, list[float]] = {True: [], False: []}
    try:
        for round_number in range(args.rounds):
            order = (True, False) if round_number % 2 == 0 else (False, True)
            for notify in order:
                rates[notify].append(rate(url, notify, args.writers, args.seconds))
            print(f"  round {round_number + 1}/{args.rounds} done", flush=True)
    finally:
        with psycopg.connect(args.url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    print(
        f"commits/s, {args.writers} writers, median of {args.rounds} rounds"
        f" (load average {os.getloadavg()[0]:.1f})"
    )
    for notify, values in rates.items():
        runs = " ".join(f"{v:,.0f}" for v in values)
        print(
            f"  NOTIFY {'on ' if notify else 'off'} {statistics.median(values):>9,.0f}   [{runs}]"
        )
    ratios = [on / off for on, off in zip(rates[True], rates[False], strict=True)]
    print(f"  on/off {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
