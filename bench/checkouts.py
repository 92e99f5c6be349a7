"""This checkout's front end beside another checkout's, on one Redis, interleaved.

    python3 bench/checkouts.py OTHER_CHECKOUT [--rounds 5] [--seconds 5] [--connections 32]
                               [--postgres postgresql://postgres@127.0.0.1:5432/postgres]

What a change that should not move the speed (a refactoring, a dependency
bump) is measured with: `git worktree add /tmp/before <commit>`, then this
script with `/tmp/before`. Each checkout serves `web:create_app()` under
gunicorn with its own packaged gunicorn settings, from its own directory
(its own code on `sys.path`, this interpreter's dependencies), on the same
private redis-server (store on db 1, broker on db 2; no Celery worker runs,
so a send is measured up to its publish, with room made in the turn book for
every send). Both then get the same loads from
the same generator as `bench/web.py`: GetTask and SendMessage (returning at
once) over A2A 1.0 JSON-RPC and over HTTP+JSON, in interleaved rounds (each
round in a rotated order). With `--postgres` each checkout's store is a
schema of its own on that PostgreSQL, migrated by that checkout's own
`toolnexus-serve db upgrade` and dropped at the end (the broker stays on the
Redis). Each figure is the median over the rounds; each
ratio (this checkout over the other) the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.processes import exit_on_sigterm, stop_group, wait_for_port  # noqa: E402
from bench.web import (  # noqa: E402
    A2A_10,
    SEND,
    Fleet,
    Generator,
    Load,
    fresh,
    load_python,
    load_wrk,
    make_room,
    measure_all,
    post,
    rest_send,
    rpc_body,
    send_v10,
    service_env,
)
from tests.support.redis_server import RedisServer, free_port  # noqa: E402

LOADS = ("GetTask", "SendMessage", "GetTask, HTTP+JSON", "SendMessage, HTTP+JSON")


def gunicorn_settings(checkout: Path) -> str:
    """The checkout's packaged gunicorn settings module, wherever it keeps it."""
    for module in ("web.http.gunicorn_conf", "web.gunicorn_conf"):
        if (checkout / (module.replace(".", "/") + ".py")).exists():
            return f"python:{module}"
    raise SystemExit(f"{checkout}: no packaged gunicorn settings (web/**/gunicorn_conf.py)")


class FrontEnd:
    """gunicorn serving one checkout's `web:create_app()` on a free port."""

    def __init__(self, checkout: Path, redis_url: str, store_url: str) -> None:
        self.checkout = checkout
        self.port = free_port()
        env = {
            **os.environ,
            "PYTHONPATH": str(checkout),
            "TOOLNEXUS_STORE": store_url,
            "TOOLNEXUS_BROKER_URL": f"{redis_url}/2",
            "TOOLNEXUS_QUEUE": "bench",
            "TOOLNEXUS_LOG_LEVEL": "WARNING",
        }
        if store_url.startswith("postgresql"):
            # Migrated by the checkout's own code, so each serves its own schema version.
            upgrade = [sys.executable, "-m", "worker.cli.main", "db", "upgrade"]
            subprocess.run(upgrade, cwd=checkout, env=env, check=True, capture_output=True)
            # Room made by the checkout's own code too, in its own turn book.
            room = [sys.executable, "-c", "import os, bench.web; bench.web.make_room(os.environ)"]
            subprocess.run(room, cwd=checkout, env=env, check=True, capture_output=True)
        command = [sys.executable, "-m", "gunicorn", "-c", gunicorn_settings(checkout)]
        command += ["-b", f"127.0.0.1:{self.port}", "--log-level", "warning", "web:create_app()"]
        self.process = subprocess.Popen(command, cwd=checkout, env=env, start_new_session=True)
        try:
            wait_for_port(self.port, self.process, str(checkout), timeout=30)
        except RuntimeError:
            self.stop()
            raise

    def stop(self) -> None:
        stop_group(self.process)

    def loads(self, label: str) -> list[Load]:
        task = post(self.port, fresh(send_v10()), A2A_10)["result"]["task"]
        get = rpc_body("GetTask", {"id": task["id"]})
        rest_get = Load("", self.port, b"", A2A_10, "GET", f"/tasks/{task['id']}")
        return [
            Load(f"{label} GetTask", self.port, get, A2A_10),
            Load(f"{label} SendMessage", self.port, send_v10(), A2A_10),
            Load(f"{label} GetTask, HTTP+JSON", rest_get.port, b"", A2A_10, "GET", rest_get.path),
            Load(f"{label} SendMessage, HTTP+JSON", self.port, rest_send(), A2A_10, "POST", SEND),
        ]


def drop_schemas(server: str, stores: list[str]) -> None:
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        for store in stores:
            conn.execute(f"DROP SCHEMA IF EXISTS {store.rsplit('=', 1)[1]} CASCADE")


def report(rates: dict[str, list[float]], here: Path, other: Path) -> None:
    print(f"\nreq/s, median of {len(next(iter(rates.values())))} runs (each run's figure after it)")
    for name, values in rates.items():
        runs = " ".join(f"{value:,.0f}" for value in values)
        print(f"  {name:<36} {statistics.median(values):>9,.0f}   [{runs}]")
    print(f"\nthis checkout ({here}) over the other ({other}): median of per-round ratios")
    for load in LOADS:
        pairs = zip(rates[f"this {load}"], rates[f"other {load}"], strict=True)
        per_round = [a / b for a, b in pairs if b > 0]
        spread = f"{min(per_round):.2f}-{max(per_round):.2f}"
        print(f"  {load:<24} {statistics.median(per_round):>6.2f}x  ({spread})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("other", type=Path, help="the other checkout (a git worktree)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--seconds", type=float, default=5.0, help="per run (default 5)")
    parser.add_argument("--connections", type=int, default=32, help="default 32")
    parser.add_argument("--postgres", default="", help="the stores on this PostgreSQL")
    args = parser.parse_args()
    exit_on_sigterm()
    other = args.other.resolve()
    generator: Generator = load_wrk if shutil.which("wrk") else load_python
    print(
        f"load: {'wrk' if shutil.which('wrk') else 'python threads'}, {args.connections}"
        f" connections, {args.rounds} interleaved rounds of {args.seconds:g} s per figure;"
        f" load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    redis_server = RedisServer().start()
    # Room in the turn book, as an idle fleet would have: every send is taken
    # and published, and the publish is measured too.
    make_room(service_env(redis_server.url))
    stores = [f"{redis_server.url}/1"] * 2
    if args.postgres:
        stores = [f"{args.postgres}?schema=bench_{name}_{os.getpid()}" for name in ("this", "that")]
    front_ends: list[FrontEnd] = []
    try:
        front_ends.append(FrontEnd(ROOT, redis_server.url, stores[0]))
        front_ends.append(FrontEnd(other, redis_server.url, stores[1]))
        loads = [*front_ends[0].loads("this"), *front_ends[1].loads("other")]
        for load in loads:  # every request works once before it is measured
            load.check()
        fleet = Fleet({load.name: load for load in loads}, workers=0)
        rates = measure_all(fleet, generator, args.rounds, args.seconds, args.connections)
    finally:
        for front_end in front_ends:
            front_end.stop()
        redis_server.close()
        if args.postgres:
            drop_schemas(args.postgres, stores)
    report(rates, ROOT, other)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
