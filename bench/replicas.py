"""What TOOLNEXUS_REDIS_MIN_REPLICAS=1 costs, and how soon a fleet sends again after a failover.

    python3 bench/replicas.py [--tasks 1000] [--rounds 3] [--latency-tasks 500]
                              [--failovers 2] [--quick]

1. Cost: a Redis master with one replica (`--replicaof`, on loopback), and
   two fleets on it at once (gunicorn front end, one `celery worker -c 2`,
   echo agent), alike but for the setting: one acknowledges on the
   master's word, the other waits for the replica (`WAIT 1`) on every
   write it acknowledges. Each on its own databases and queue. Measured in
   turn for several rounds, the order swapped each round: SendMessage
   throughput over HTTP until every task is completed, and then, open loop
   at half the slower fleet's rate, p50 and p99 from just before the send
   to the task's `completed` status.
2. Failover: a master, one or two replicas and three Sentinels
   (`down-after-milliseconds` 1000), one fleet on `redis+sentinel://` URLs,
   a sender in a loop; the master is SIGKILLed (and restarted once the
   replica is promoted, as an orchestrator would) and the time until the
   next acknowledged send is taken, beside the time Sentinel took to
   promote. Without the setting; with it and one replica (no write can be
   confirmed until the old master follows the new one); with it and two
   replicas (one is left to confirm). The aim: within Sentinel's own
   detection and promotion plus 2 s.

Everything shares one machine: compare the two fleets' ratios, not the
absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import exit_on_sigterm, percentile
from bench.throughput import Service
from bench.web import rpc_body
from tests.support.redis_server import RedisServer
from tests.support.sentinel import SentinelGroup

ROUNDS = 3


def fleet_env(store: str, broker: str, queue: str, replicas: int) -> dict[str, str]:
    return {
        "TOOLNEXUS_STORE": store,
        "TOOLNEXUS_BROKER_URL": broker,
        "TOOLNEXUS_QUEUE": queue,
        "TOOLNEXUS_PUSH_QUEUE": f"{queue}-push",
        "TOOLNEXUS_LOG_LEVEL": "WARNING",
        "TOOLNEXUS_RUN": "examples.agents:echo",
        "TOOLNEXUS_REDIS_MIN_REPLICAS": str(replicas),
    }


def cost(tasks: int, rounds: int, latency_tasks: int) -> None:
    master = RedisServer(args=["--repl-diskless-sync-delay", "0"]).start()
    replica = RedisServer(args=["--replicaof", "127.0.0.1", str(master.port)]).start()
    fleets: dict[str, Service] = {}
    try:
        for name, replicas, db in (("master's word", 0, 1), ("WAIT 1", 1, 3)):
            env = fleet_env(f"{master.url}/{db}", f"{master.url}/{db + 1}", f"b{db}", replicas)
            fleets[name] = Service(env, workers=1, concurrency=2)
        rates: dict[str, list[float]] = {name: [] for name in fleets}
        order = list(fleets)
        for n in range(rounds):
            for name in order:
                rates[name].append(fleets[name].rate([f"round {n}"] * tasks))
            order.reverse()
            line = ", ".join(f"{name} {rates[name][-1]:,.0f}/s" for name in fleets)
            print(f"   round {n + 1}: {line}", flush=True)
        plain, waited = (statistics.median(rates[name]) for name in fleets)
        print(
            f"   median sends/s until completed: master's word {plain:,.0f},"
            f" WAIT 1 {waited:,.0f}: {waited / plain:.2f}x"
        )
        pace = min(plain, waited) / 2
        print(f"   latency, open loop at {pace:,.0f} sends/s, send -> completed status:")
        for name, service in fleets.items():
            values = sorted(service.latencies(["latency"] * latency_tasks, pace))
            p50, p99 = percentile(values, 0.5) * 1000, percentile(values, 0.99) * 1000
            print(f"     {name:>14}: p50 {p50:7.1f} ms   p99 {p99:7.1f} ms", flush=True)
    finally:
        for service in fleets.values():
            service.stop()
        replica.close()
        master.close()


def send_once(port: int) -> bool:
    message = {
        "role": "user",
        "messageId": uuid.uuid4().hex,
        "parts": [{"kind": "text", "text": "after"}],
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/",
        rpc_body("SendMessage", {"message": message}),
        {"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return "result" in json.loads(response.read())
    except OSError:
        return False


FAILOVERS = (
    ("asynchronous, one replica", 0, 1),
    ("MIN_REPLICAS=1, one replica", 1, 1),
    ("MIN_REPLICAS=1, two replicas", 1, 2),
)


def failover(min_replicas: int, replicas: int) -> tuple[float, float]:
    """Seconds from the kill to the promotion, and to the next acknowledged send."""
    group = SentinelGroup(replicas=replicas).start()
    service: Service | None = None
    try:
        url = group.url.removesuffix("/0")
        env = fleet_env(f"{url}/1", f"{url}/2", "bf", min_replicas)
        service = Service(env, workers=1, concurrency=2)
        port = service.web.port
        acknowledged: list[tuple[float, float]] = []  # (sent, answered) of each acknowledged send
        stop = threading.Event()

        def sender() -> None:
            while not stop.is_set():
                sent = time.monotonic()
                if send_once(port):
                    acknowledged.append((sent, time.monotonic()))
                else:
                    time.sleep(0.01)

        thread = threading.Thread(target=sender, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while len(acknowledged) < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        killed = time.monotonic()
        group.kill_master()
        group.wait_for_failover()
        promoted = time.monotonic() - killed
        group.master.start()  # back, as a replica of the promoted node
        # A send answered just after the kill may have been made before it: only
        # sends made after the kill count.
        while not any(sent > killed for sent, _ in acknowledged) and time.monotonic() < killed + 60:
            time.sleep(0.01)
        stop.set()
        thread.join(10)
        first = min((done for sent, done in acknowledged if sent > killed), default=float("nan"))
        return promoted, first - killed
    finally:
        if service is not None:
            service.stop()
        group.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000, help="tasks a round (default 1000)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds (default {ROUNDS})")
    parser.add_argument(
        "--latency-tasks", type=int, default=500, help="tasks sent at half rate (default 500)"
    )
    parser.add_argument("--failovers", type=int, default=2, help="failovers timed (default 2)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 rounds of 200 tasks")
    args = parser.parse_args()
    exit_on_sigterm()
    if args.quick:
        args.tasks, args.rounds, args.latency_tasks, args.failovers = 200, 2, 100, 1
    print(f"1. TOOLNEXUS_REDIS_MIN_REPLICAS=1 beside 0, {args.tasks} tasks a round", flush=True)
    cost(args.tasks, args.rounds, args.latency_tasks)
    print("\n2. failover: master SIGKILLed under a sender, down-after 1000 ms", flush=True)
    for n in range(args.failovers):
        for name, min_replicas, replicas in FAILOVERS:
            promoted, first = failover(min_replicas, replicas)
            verdict = "met" if first <= promoted + 2 else "NOT met"
            print(
                f"   run {n + 1}, {name:<29} promoted {promoted:.2f} s after the kill, next"
                f" acknowledged send {first:.2f} s after it (aim promotion + 2 s: {verdict})",
                flush=True,
            )


if __name__ == "__main__":
    main()
