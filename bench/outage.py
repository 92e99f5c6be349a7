"""How long a caller waits for its error while Redis is out (not a timed test):

    python3 bench/outage.py [--calls 300] [--hung-calls 40] [--rounds 2] [--clients 4]

compose's own front end (`toolnexus-serve web`: gunicorn, gevent workers)
and beat on a private Redis, warmed up; then, each round, the same calls
(GetTask of a saved task, a non-blocking SendMessage, ListTasks, in turn,
on JSON-RPC and HTTP+JSON alike, each on a connection of its own, from
`--clients` threads) three ways: with Redis up (the peer: what a served call
costs here), with Redis stopped (refused connects: the promise is an error
within about the store timeout, 2 s) and with Redis paused by SIGSTOP (a
hung host: the promise is three store timeouts, 6 s; `--hung-calls` of
them, each waiting that long). Prints, per way and
round, the calls, how many got `task store unavailable` (the error the
promise names) and the p50, p99 and slowest time to the answer, and the
outage's p99 over the served p99.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.a2a import send_text, wait_ready
from tests.support.compose import local_stack
from tests.support.redis_server import RedisServer
from web.core.errors import STORE_UNAVAILABLE

SETTINGS = {"TOOLNEXUS_REAP_EVERY": "1"}
V10 = {"A2A-Version": "1.0"}


def calls(url: str, known: str) -> list[Callable[[], bool]]:
    """Each call the promise names, on both HTTP bindings; each returns
    whether it was answered with the store's error."""

    def rpc(method: str, params: dict[str, Any]) -> Callable[[], bool]:
        def call() -> bool:
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            reply = requests.post(f"{url}/", json=body, headers=V10, timeout=60).json()
            return str(reply.get("error", {}).get("message", "")).startswith(STORE_UNAVAILABLE)

        return call

    def rest(verb: str, path: str, body: dict[str, Any] | None = None) -> Callable[[], bool]:
        def call() -> bool:
            answer = requests.request(verb, f"{url}{path}", json=body, headers=V10, timeout=60)
            return answer.status_code >= 500 and STORE_UNAVAILABLE in answer.text

        return call

    def message() -> dict[str, Any]:
        parts = [{"text": "during the outage"}]
        return {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": parts}

    send = {"configuration": {"returnImmediately": True}}
    return [
        rpc("GetTask", {"id": known}),
        lambda: rpc("SendMessage", {"message": message(), **send})(),
        rpc("ListTasks", {"pageSize": 10}),
        rest("GET", f"/tasks/{known}"),
        lambda: rest("POST", "/message:send", {"message": message(), **send})(),
        rest("GET", "/tasks?pageSize=10"),
    ]


def measured(
    pending: list[Callable[[], bool]], count: int, clients: int
) -> tuple[list[float], int]:
    """`count` calls (in turn from `pending`) over `clients` threads: each
    call's seconds, and how many were answered with the store's error."""
    cycle = itertools.cycle(pending)
    chosen = [next(cycle) for _ in range(count)]

    def timed(call: Callable[[], bool]) -> tuple[float, bool]:
        started = time.monotonic()
        try:
            erred = call()
        except (requests.RequestException, ValueError):
            erred = False
        return time.monotonic() - started, erred

    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(timed, chosen))
    return [took for took, _ in results], sum(erred for _, erred in results)


@contextmanager
def way(redis: RedisServer, url: str, name: str) -> Iterator[None]:
    if name == "stopped":
        redis.stop()
    elif name == "paused":
        redis.pause()
    try:
        yield
    finally:
        if name == "stopped":
            redis.start()
        elif name == "paused":
            redis.resume()
        if name != "served":
            wait_ready(url, timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--hung-calls", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=4)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="toolnexus-outage-"))
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    with local_stack(folder, SETTINGS, appendonly=True) as (redis, stack):
        stack.start("web")
        stack.start("beat")
        wait_ready(stack.web_url)
        known = str(send_text(stack.web_url, "saved before the outage")["id"])
        pending = calls(stack.web_url, known)
        measured(pending, 60, options.clients)  # warm: every worker's pools filled
        for round_number in range(1, options.rounds + 1):
            served_p99 = 0.0
            for name, promise in (("served", ""), ("stopped", "2 s"), ("paused", "6 s")):
                count = options.hung_calls if name == "paused" else options.calls
                with way(redis, stack.web_url, name):
                    times, erred = measured(pending, count, options.clients)
                p50 = statistics.median(times)
                p99 = statistics.quantiles(times, n=100)[98]
                served_p99 = p99 if name == "served" else served_p99
                ratio = f"  p99 / served p99 {p99 / served_p99:5.0f}x" if name != "served" else ""
                print(
                    f"round {round_number}  Redis {name:8s} calls {len(times):4d}"
                    f"  store errors {erred:4d}  p50 {p50:6.3f} s  p99 {p99:6.3f} s"
                    f"  slowest {max(times):6.3f} s"
                    f"{f'  (promise {promise})' if promise else ''}{ratio}"
                    f"  load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
