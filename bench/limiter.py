"""The send limiter of this checkout beside another checkout's, on one Redis and
one PostgreSQL, interleaved: whether a backend's own script or function for
the per-owner limits is worth keeping beside the limiter written once over
small documents (an accelerator stays only where it is at least 1.3x).

    python3 bench/limiter.py OTHER_CHECKOUT [--rounds 3] [--calls 2000] [--threads 4]

Each checkout's limiter runs in a process of its own, from its own directory
(its own code on `sys.path`, this interpreter's dependencies), on a store of
its own: a Redis database each on one private redis-server, a schema each,
migrated by that checkout's code, in one PostgreSQL database. A measure is
`--threads` threads making `--calls` steps in all, each thread for an owner
of its own, as a front end's request threads do: `take` (a rate limit) and
`reserve` then `release` (an active cap). Rounds alternate which checkout
goes first. Each figure is the median over the rounds, steps a second; each
ratio (this checkout over the other) the median of the per-round ratios.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from bench.processes import (  # noqa: E402
    in_checkout,
    print_ratios,
    side_by_side,
    side_by_side_options,
)
from tests.support.postgres import admin, url_of  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

STEPS = ("take", "reserve+release")

# Run in the checkout's own directory: its store's limiter, timed.
_MEASURE = """
import json, sys, threading, time
from shared.store.resolve import resolve_store
url, step, calls, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = resolve_store(url)
limiter = store.send_limiter()
limiter.take("warm", 1e9, 10**9)
start = threading.Barrier(threads + 1)
def run(owner):
    start.wait()
    for n in range(calls // threads):
        if step == "take":
            assert limiter.take(owner, 1e9, 10**9) == 0.0
        else:
            assert limiter.reserve(owner, f"t{n}", 10**6) is None
            limiter.release(owner, f"t{n}")
workers = [threading.Thread(target=run, args=(f"owner-{i}",)) for i in range(threads)]
for w in workers:
    w.start()
start.wait()
began = time.perf_counter()
for w in workers:
    w.join()
print(json.dumps(calls / (time.perf_counter() - began)))
"""

_MIGRATE = """
import sys, psycopg
from shared.stores.postgres import schema
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    schema.upgrade(conn, sys.argv[2])
"""


def main() -> None:
    options = side_by_side_options(__doc__.splitlines()[0])
    checkouts = {"this": ROOT, "other": options.other.resolve()}
    database = f"toolnexus_bench_{uuid.uuid4().hex[:8]}"
    with admin() as conn:
        conn.execute(f'CREATE DATABASE "{database}"')
    redis = RedisServer().start()
    try:
        stores: dict[tuple[str, str], str] = {}
        for n, (name, checkout) in enumerate(checkouts.items()):
            stores[("redis", name)] = f"{redis.url}/{n + 1}"
            schema_name = f"bench_{name}"
            with psycopg.connect(url_of(database), autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {schema_name}")
            in_checkout(checkout, _MIGRATE, url_of(database), schema_name)
            stores[("postgres", name)] = url_of(database, schema_name)
        cases = [(kind, step) for kind in ("redis", "postgres") for step in STEPS]

        def measure(name: str, kind: str, step: str) -> float:
            calls, threads = str(options.calls), str(options.threads)
            args = (stores[(kind, name)], step, calls, threads)
            return float(in_checkout(checkouts[name], _MEASURE, *args))

        figures = side_by_side(checkouts, options.rounds, cases, measure)
        print(f"{options.rounds} rounds, {options.calls} steps on {options.threads} threads each")
        print_ratios(figures, cases, "store")
    finally:
        redis.close()
        with admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


if __name__ == "__main__":
    main()
