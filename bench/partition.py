"""How soon the fleet serves again once a partition of its store's link heals
(not a timed test):

    python3 bench/partition.py [--backends postgresql,redis,file] [--rounds 3]
                               [--hold 7] [--rate 20]

For each backend, the fleet of the histories (tests/support/history_run.py:
the front end under gunicorn, the gRPC process, two Celery workers, beat,
each server the run's own; the store's link through a `FaultProxy`, on the
file store the broker's) takes a steady stream of sends (`--rate` a second,
JSON-RPC `message/send`, each task 0.1 s of work), and each round
partitions the link for `--hold` seconds: every open connection is lost for
good, neither side told (`FaultProxy.partition`), as when a host goes away
or a middlebox drops the connections' state. Once it heals, measured from
the heal:

- first send: the first send answered with a task;
- first run: the first task sent after the heal completed;
- all ended: every task acknowledged before the heal (during the partition
  too) ended.

Prints a row per round with the 1-minute load average at its start, and
the medians per backend.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.history_run import history_fleet

ENDED = {"completed", "failed", "canceled", "rejected"}


@dataclass
class Sent:
    started: float
    acked: float | None = None
    task_id: str | None = None


@dataclass
class Sender:
    url: str
    rate: float
    sent: list[Sent] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self) -> None:
        while not self.stop.wait(1 / self.rate):
            threading.Thread(target=self._one, daemon=True).start()

    def _one(self) -> None:
        entry = Sent(time.monotonic())
        with self.lock:
            self.sent.append(entry)
        message = {
            "role": "user",
            "messageId": uuid.uuid4().hex,
            "parts": [{"kind": "text", "text": f"sleep 0.1 {uuid.uuid4().hex[:8]}"}],
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
        for _ in range(60):  # retried with the same messageId, as a client does
            try:
                reply = requests.post(f"{self.url}/", json=body, timeout=10).json()
            except (requests.RequestException, ValueError):
                time.sleep(0.2)
                continue
            if "result" in reply:
                entry.task_id, entry.acked = str(reply["result"]["id"]), time.monotonic()
                return
            time.sleep(0.2)

    def snapshot(self) -> list[Sent]:
        with self.lock:
            return list(self.sent)


def state(url: str, task_id: str) -> str:
    try:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task_id}}
        reply = requests.post(f"{url}/", json=body, timeout=10).json()
        return str(reply.get("result", {}).get("status", {}).get("state", ""))
    except (requests.RequestException, ValueError):
        return ""


def until(probe: Any, since: float, limit: float = 300.0) -> float | None:
    """Seconds from `since` (monotonic) until `probe()` is true (polled),
    None past `limit`."""
    while time.monotonic() - since < limit:
        if probe():
            return time.monotonic() - since
        time.sleep(0.05)
    return None


def round_of(fleet: Any, sender: Sender, hold: float) -> dict[str, float | None]:
    url = fleet.stack.web_url
    fleet.proxy.partition()
    time.sleep(hold)
    fleet.proxy.heal()
    healed = time.monotonic()
    before = [s for s in sender.snapshot() if s.started < healed]

    def first_send() -> bool:
        return any(s.acked is not None and s.acked > healed for s in sender.snapshot())

    first = until(first_send, healed)

    def first_run() -> bool:
        later = [s.task_id for s in sender.snapshot() if s.started > healed and s.task_id]
        return any(state(url, task_id) == "completed" for task_id in later[:20])

    ran = until(first_run, healed)
    done: set[str] = set()

    def all_ended() -> bool:
        for s in before:
            if s.task_id is None:
                if s.acked is None and time.monotonic() - healed < 60:
                    return False  # still being retried
                continue
            if s.task_id not in done:
                if state(url, s.task_id) not in ENDED:
                    return False
                done.add(s.task_id)
        return True

    ended = until(all_ended, healed)
    return {"first send": first, "first run": ran, "all ended": ended}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="postgresql,redis,file")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hold", type=float, default=7.0)
    parser.add_argument("--rate", type=float, default=20.0)
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="toolnexus-partition-"))
    print(f"fleets under {folder}; partition lasts {options.hold:g} s", flush=True)
    failed = False
    for backend in [name.strip() for name in options.backends.split(",") if name.strip()]:
        here = folder / backend
        here.mkdir()
        rows: list[dict[str, float | None]] = []
        with history_fleet(here, backend, seed=0) as fleet:
            sender = Sender(fleet.stack.web_url, options.rate)
            thread = threading.Thread(target=sender.run, daemon=True)
            thread.start()
            time.sleep(5.0)  # steady first
            for number in range(1, options.rounds + 1):
                load = os.getloadavg()[0]
                row = round_of(fleet, sender, options.hold)
                rows.append(row)
                shown = ", ".join(
                    f"{name} {'never' if value is None else f'{value:.2f} s'}"
                    for name, value in row.items()
                )
                print(f"{backend:10s} round {number}: {shown} (load {load:.2f})", flush=True)
                failed |= any(value is None for value in row.values())
                time.sleep(5.0)
            sender.stop.set()
            thread.join()
        medians = {
            name: statistics.median(v for r in rows if (v := r[name]) is not None)
            for name in rows[0]
            if any(r[name] is not None for r in rows)
        }
        print(
            f"{backend:10s} medians: "
            + ", ".join(f"{name} {value:.2f} s" for name, value in medians.items()),
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
