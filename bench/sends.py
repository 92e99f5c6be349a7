"""What handing one task to the broker costs the front end, per broker.

    python3 bench/sends.py [--sends 2000] [--broker amqp://.../vhost ...]

Times the front end's own dispatcher (`CeleryDispatcher.enqueue`, what a
SendMessage does after saving the task), one send after another in one
thread, on a private redis-server (the direct Redis publish of
shared.broker.redis_queue) and on each --broker given (RabbitMQ goes
through kombu's send_task with publisher confirms: each send waits for the
broker's ack; a quorum queue acks once its log is on disk, so both queue
types are timed). Every run sends to a queue of its own that nothing
consumes; give RabbitMQ a virtual host of its own, deleted afterwards.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import exit_on_sigterm, percentile
from shared.broker.amqp import is_amqp
from shared.broker.dispatch import CeleryDispatcher
from shared.ops.startup import masked
from shared.settings import AMQP_QUEUE_TYPES, Settings
from tests.support.redis_server import RedisServer

WARM_UP = 50


def timed_sends(broker_url: str, queue_type: str, sends: int) -> list[float]:
    queue = f"bench-sends-{secrets.token_hex(4)}"
    settings = Settings(broker_url=broker_url, queue=queue, amqp_queue_type=queue_type)
    dispatcher = CeleryDispatcher(settings)
    try:
        for n in range(WARM_UP):
            dispatcher.enqueue(f"warm-{n}")
        took = []
        for n in range(sends):
            started = time.perf_counter()
            dispatcher.enqueue(f"task-{n}")
            took.append(time.perf_counter() - started)
        return took
    finally:
        dispatcher.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=2000, help="timed sends per broker")
    parser.add_argument("--broker", action="append", default=[], help="another broker URL")
    args = parser.parse_args()
    exit_on_sigterm()
    server = RedisServer().start()
    try:
        runs = [(f"{server.url}/2", "")]
        runs += [(url, kind) for url in args.broker for kind in AMQP_QUEUE_TYPES if is_amqp(url)]
        runs += [(url, "") for url in args.broker if not is_amqp(url)]
        for url, kind in runs:
            took = timed_sends(url, kind or "quorum", args.sends)
            mean = statistics.fmean(took) * 1e6
            p50, p99 = percentile(took, 0.5) * 1e6, percentile(took, 0.99) * 1e6
            print(
                f"{masked(url):<52} {kind:<8} {mean:>7.0f} µs a send (p50 {p50:.0f}, p99 {p99:.0f};"
                f" {args.sends} sends, {1e6 / mean:,.0f}/s in one thread)",
                flush=True,
            )
    finally:
        server.close()


if __name__ == "__main__":
    main()
