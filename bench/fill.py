"""Filling a store through the embedded server: the file (or SQLite) store
beside the memory store, interleaved in one run.

    python3 bench/fill.py [--tasks 20000] [--threads 8] [--rounds 2] [--stores memory,file,sqlite]

Each round starts `toolnexus-serve` (the embedded server: front end and
worker threads in one process, the default echo agent) once per store, the
memory store and then a fresh store of each other kind (the order reversed
every other round), and sends `--tasks` messages from `--threads` client threads
over JSON-RPC, each a blocking SendMessage that returns once its task is
finished. Printed per round: tasks a second on each store and each one's
ratio to the memory store's (the file store's aim: at least 0.5x).
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.processes import timed_threads  # noqa: E402
from tests.support.embedded import embedded_server  # noqa: E402


def fill(url: str, tasks: int, threads: int) -> float:
    """Tasks a second: `tasks` blocking sends from `threads` threads."""
    numbers = itertools.count()
    failures: list[str] = []

    def sender(_: int) -> None:
        with requests.Session() as session:
            while next(numbers) < tasks and not failures:
                message = {
                    "role": "ROLE_USER",
                    "messageId": str(uuid.uuid4()),
                    "parts": [{"text": "fill"}],
                }
                body = {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SendMessage",
                    "params": {"message": message},
                }
                reply: dict[str, Any] = session.post(
                    f"{url}/", json=body, headers={"A2A-Version": "1.0"}, timeout=60
                ).json()
                state = reply.get("result", {}).get("task", {}).get("status", {}).get("state")
                if state != "TASK_STATE_COMPLETED":
                    failures.append(repr(reply)[:300])

    elapsed = timed_threads(sender, threads)
    if failures:
        raise SystemExit(f"a send did not complete: {failures[0]}")
    return tasks / elapsed


def spec_of(kind: str, folder: Path) -> str:
    """The TOOLNEXUS_STORE of a fresh store of `kind` under `folder`."""
    return {
        "memory": "memory",
        "file": f"file:{folder / 'tasks'}",
        "sqlite": f"sqlite:///{folder / 'tasks.db'}",
    }[kind]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--stores", default="memory,file", help="memory first: the others' peer")
    options = parser.parse_args()
    kinds = options.stores.split(",")
    if kinds[0] != "memory" or len(kinds) < 2:
        raise SystemExit("--stores: memory, then the stores to measure against it")
    ratios: dict[str, list[float]] = {kind: [] for kind in kinds[1:]}
    for round_ in range(options.rounds):
        rates: dict[str, float] = {}
        for kind in kinds if round_ % 2 == 0 else kinds[::-1]:
            with tempfile.TemporaryDirectory(prefix="toolnexus-fill-") as scratch:
                folder = Path(scratch)
                environment = {"TOOLNEXUS_STORE": spec_of(kind, folder)}
                with embedded_server(folder, environment) as (host, port):
                    rates[kind] = fill(f"http://{host}:{port}", options.tasks, options.threads)
        shown = ", ".join(f"{kind} {rate:,.0f} tasks/s" for kind, rate in rates.items())
        for kind in ratios:
            ratios[kind].append(rates[kind] / rates["memory"])
        against = ", ".join(f"{kind}/memory {ratios[kind][-1]:.2f}x" for kind in ratios)
        print(f"round {round_ + 1}: {shown}; {against}", flush=True)
    for kind, found in ratios.items():
        print(f"{kind}/memory, median of {options.rounds} rounds: {statistics.median(found):.2f}x")


if __name__ == "__main__":
    main()
