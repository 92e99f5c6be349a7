"""Fair turns across owners: a small owner's wait while another floods, and what turns cost.

    python3 bench/fairness.py [--flood 2000] [--small 20] [--rounds 2]
                              [--seconds 0.01] [--tasks 2000] [--quick]

Starts a private redis-server and two fleets on it, one with fair share
(the default) and one with `TOOLNEXUS_FAIR_SHARE=false` (arrival order),
each a gunicorn front end (web.http.gunicorn_conf) and two `celery -A
worker worker -c 1` (prefork) running `examples.agents:slow`, on a store
database and a queue of its own. Owners A and B each have a bearer token.

1. B's wait: B sends `--small` tasks, one every 50 ms, and each one's wait
   is measured from just before its send to its `working` status (stamped
   by the worker that claimed it): on an idle fleet, and right after A sent
   `--flood` tasks at once. p50 and p99, fair and first-come, round after
   round in turn; each fleet drains A's flood before the next round.
2. Throughput: bench/throughput.py's service (gunicorn and one `celery
   worker -c 2` running the echo agent), `--tasks` tasks a round, once with
   fair turns and once in arrival order, both running at once and measured
   in turn (the order swapped each round); the cost of turns is 1 minus the
   median of the per-round ratios (the aim: at most 10%).

Everything shares one 2-core machine: compare ratios, not absolute numbers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import CeleryWorker, exit_on_sigterm, gunicorn, percentile
from bench.throughput import SENDERS, WORKER_FLAGS, Service, send_all, wait_completed
from tests.support.redis_server import RedisServer

TOKENS = {"a": "bench-token-a", "b": "bench-token-b"}
SMALL_EVERY = 0.05  # seconds between B's sends


class Fleet:
    """A front end and two one-slot workers, fair or first-come."""

    def __init__(self, name: str, redis_url: str, db: int, fair: bool, agent: str) -> None:
        import redis

        self.name = name
        self.env = {
            "TOOLNEXUS_STORE": f"{redis_url}/{db}",
            "TOOLNEXUS_BROKER_URL": f"{redis_url}/{db + 1}",
            "TOOLNEXUS_QUEUE": f"bench-{name}",
            "TOOLNEXUS_LOG_LEVEL": "WARNING",
            "TOOLNEXUS_RUN": agent,
            "TOOLNEXUS_FAIR_SHARE": "true" if fair else "false",
            "TOOLNEXUS_API_TOKENS": ",".join(f"{who}:{token}" for who, token in TOKENS.items()),
        }
        self.store = redis.Redis.from_url(self.env["TOOLNEXUS_STORE"])
        self.web = gunicorn("web:create_app()", self.env, f"{name} front end")
        self.workers: list[CeleryWorker] = []
        try:
            flags = ("-c", "1", *WORKER_FLAGS)
            for n in range(2):
                self.workers.append(CeleryWorker("worker", self.env, f"{name}{n}", flags))
            warm = self.send("a", ["0 warm"] * 4)[0]
            wait_completed(self.store, warm, 60)
        except BaseException:
            self.stop()
            raise

    def send(
        self, owner: str, texts: list[str], rate: float | None = None, senders: int = SENDERS
    ) -> tuple[list[str], list[float]]:
        """SendMessage each text as `owner`; the task ids and the wall time
        just before each send."""
        return send_all(self.web.port, texts, rate, token=TOKENS[owner], senders=senders)

    def started_at(self, task_id: str) -> float:
        """When the task's `working` status was saved (the Redis store files each
        status change with its time in the task's `hist` list)."""
        for entry in self.store.lrange(f"toolnexus:hist:{task_id}", 0, -1):
            stamp, _, state = entry.decode().partition("|")
            if state == "working":
                return float(stamp)
        raise RuntimeError(f"task {task_id} never ran")

    def small_waits(self, small: int, seconds: float, flood: int) -> list[float]:
        """B's send -> start waits, after A sent `flood` tasks at once (0: idle)."""
        flooded: list[str] = []
        if flood:
            flooded, _ = self.send("a", [f"{seconds} a"] * flood)
        ids, sent_at = self.send("b", [f"{seconds} b"] * small, rate=1 / SMALL_EVERY, senders=1)
        wait_completed(self.store, ids, 900)
        waits = [self.started_at(i) - t for i, t in zip(ids, sent_at, strict=True)]
        wait_completed(self.store, flooded, 900)  # drained before the next round
        return waits

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.web.stop()


def shown(values: list[float]) -> str:
    p50, p99 = (percentile(values, share) * 1000 for share in (0.5, 0.99))
    return f"p50 {p50:8,.0f} ms, p99 {p99:8,.0f} ms"


def throughput_cost(redis_url: str, tasks: int, rounds: int) -> None:
    """bench/throughput.py's service (gunicorn, one `celery worker -c 2`, echo),
    with fair turns and in arrival order, both running, measured in turn."""
    print(f"\n2. throughput, {tasks} echo tasks a round, one worker -c 2, fair and first-come")
    services: dict[str, Service] = {}
    try:
        for name, db, fair in (("fair", 5, "true"), ("fifo", 7, "false")):
            env = {
                "TOOLNEXUS_STORE": f"{redis_url}/{db}",
                "TOOLNEXUS_BROKER_URL": f"{redis_url}/{db + 1}",
                "TOOLNEXUS_QUEUE": f"bench-throughput-{name}",
                "TOOLNEXUS_LOG_LEVEL": "WARNING",
                "TOOLNEXUS_RUN": "examples.agents:echo",
                "TOOLNEXUS_FAIR_SHARE": fair,
            }
            services[name] = Service(env, workers=1, concurrency=2)
        ratios = []
        for number in range(rounds):
            order = ["fair", "fifo"] if number % 2 == 0 else ["fifo", "fair"]
            texts = [f"task {n}" for n in range(tasks)]
            rates = {name: services[name].rate(texts) for name in order}
            ratios.append(rates["fair"] / rates["fifo"])
            print(
                f"   round {number + 1}: fair {rates['fair']:,.0f}, first-come"
                f" {rates['fifo']:,.0f} tasks/s ({ratios[-1]:.2f}x)",
                flush=True,
            )
    finally:
        for service in services.values():
            service.stop()
    ratio = statistics.median(ratios)
    verdict = "met" if ratio >= 0.9 else "NOT met"
    cost = f"cost {1 - ratio:.0%} (aim <= 10%: {verdict})"
    print(f"   median fair / first-come: {ratio:.2f}x; {cost}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flood", type=int, default=2000, help="A's tasks sent at once")
    parser.add_argument("--small", type=int, default=20, help="B's tasks, one every 50 ms")
    parser.add_argument("--seconds", type=float, default=0.01, help="each task's sleep")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    parser.add_argument("--tasks", type=int, default=2000, help="throughput tasks a round")
    parser.add_argument("--quick", action="store_true", help="smoke run: small numbers")
    args = parser.parse_args()
    exit_on_sigterm()
    if args.quick:
        args.flood, args.small, args.rounds, args.tasks = 300, 10, 1, 300
    load = os.getloadavg()[0]
    print(f"{os.cpu_count()} CPUs, load average {load:.2f}; two workers -c 1 a fleet", flush=True)
    server = RedisServer().start()
    fleets: dict[str, Fleet] = {}
    try:
        agent = "examples.agents:slow"
        fleets["fair"] = Fleet("fair", server.url, 1, True, agent)
        fleets["fifo"] = Fleet("fifo", server.url, 3, False, agent)
        waits: dict[tuple[str, str], list[float]] = {}
        print(
            f"\n1. B's {args.small} tasks (one every {SMALL_EVERY * 1000:.0f} ms), send -> start,"
            f" each task {args.seconds * 1000:g} ms; the flood: A's {args.flood} at once",
            flush=True,
        )
        for number in range(args.rounds):
            order = ["fair", "fifo"] if number % 2 == 0 else ["fifo", "fair"]
            for name in order:
                for label, flood in (("idle", 0), ("flood", args.flood)):
                    found = fleets[name].small_waits(args.small, args.seconds, flood)
                    waits.setdefault((name, label), []).extend(found)
                    print(f"   round {number + 1} {name:4} {label:5}: {shown(found)}", flush=True)
        print("   all rounds:")
        for (name, label), found in sorted(waits.items()):
            print(f"   {name:4} {label:5}: {shown(found)}")
        fair_p99 = percentile(waits[("fair", "flood")], 0.99)
        fifo_p99 = percentile(waits[("fifo", "flood")], 0.99)
        print(f"   B's p99 while A floods, first-come / fair: {fifo_p99 / fair_p99:,.1f}x")

        for fleet in list(fleets.values()):
            fleet.stop()
        fleets.clear()
        throughput_cost(server.url, args.tasks, max(2, args.rounds))
        print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    finally:
        for fleet in fleets.values():
            fleet.stop()
        server.close()


if __name__ == "__main__":
    main()
