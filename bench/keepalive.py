"""Latency of requests on one keep-alive connection: the embedded server beside gunicorn.

    python3 bench/keepalive.py [--requests 200] [--rounds 3]

Starts `toolnexus-serve` (the embedded server, memory store) and
`toolnexus-serve web --workers 1` (gunicorn with gevent, a file store in a
temporary folder; no broker is reached by `GET /healthz`), each on a free
port, and sends `GET /healthz` one after another on a single keep-alive
connection (`http.client`, as most clients keep theirs), in interleaved
rounds. Prints, per server and round, the first request's latency and the
median and maximum of the rest, and the ratio of the embedded server's
median to gunicorn's: what a client that keeps its connection open waits
per request.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.processes import Server, exit_on_sigterm  # noqa: E402

COMMAND = [sys.executable, "-m", "worker.cli.main"]


def latencies(port: int, requests: int) -> list[float]:
    """Milliseconds per `GET /healthz`, every request on the same connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    taken = []
    for _ in range(requests):
        started = time.perf_counter()
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"port {port}: HTTP {response.status}")
        taken.append((time.perf_counter() - started) * 1000)
    connection.close()
    return taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="per round (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    args = parser.parse_args()
    exit_on_sigterm()
    print(f"load average {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        servers = {
            "embedded": Server(
                "embedded",
                [*COMMAND, "--port", "{port}"],
                {"TOOLNEXUS_STORE": "memory", "TOOLNEXUS_LOG_LEVEL": "WARNING"},
            ),
            "gunicorn": Server(
                "gunicorn",
                [*COMMAND, "web", "--workers", "1", "--port", "{port}"],
                {"TOOLNEXUS_STORE": f"file:{folder}", "TOOLNEXUS_LOG_LEVEL": "WARNING"},
            ),
        }
        medians: dict[str, list[float]] = {name: [] for name in servers}
        try:
            for round_number in range(args.rounds):
                order = list(servers) if round_number % 2 == 0 else list(reversed(servers))
                for name in order:
                    taken = latencies(servers[name].port, args.requests)
                    rest = taken[1:]
                    medians[name].append(statistics.median(rest))
                    print(
                        f"  round {round_number + 1} {name:<9} first {taken[0]:6.2f} ms,"
                        f" then median {statistics.median(rest):.2f} ms, max {max(rest):.2f} ms",
                        flush=True,
                    )
        finally:
            for server in servers.values():
                server.stop()
    ratios = [a / b for a, b in zip(medians["embedded"], medians["gunicorn"], strict=True)]
    print(
        f"embedded / gunicorn, median latency on a keep-alive connection:"
        f" {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f});"
        f" load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
