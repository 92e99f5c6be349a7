"""The idle cost of I/O calls: thousands of waiting calls in one I/O worker process.

    python3 bench/io_calls_idle.py [--calls 5000] [--seconds 10] [--hold 90] [--rounds 2]

Each round runs, one after the other, on a private redis-server, one
`celery -A worker worker` process per mode, running --calls I/O calls that
each wait without doing anything:

- green: TOOLNEXUS_POOL=asyncio with `bench.agents:idle` (an `async def`
  awaiting a sleep): each delivery a green job on the process's loop
  (worker.engine.green_jobs), no thread per call;
- threads: TOOLNEXUS_POOL=threads with `bench.agents:idle_blocking`
  (time.sleep): each call parks a pool thread, as every call did in the I/O
  modes before the green jobs. The peer in the same run.

Every call waits until --hold seconds after the first send. Once every
call is running (the store's working index counts --calls), the worker
process's CPU time over --seconds is read from /proc and printed as a share
of one core, with its OS threads and RSS; then, once the calls have ended,
how long after their end all were completed, and how many. Aim: under 5% of a core for 5,000
I/O calls. The heartbeats (one store call a process every
TOOLNEXUS_HEARTBEAT) run as a deployment's do.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import CeleryWorker, cpu_seconds, exit_on_sigterm, rss_kib
from bench.waiting import submit_directly, wait_finished
from shared.settings import Settings
from shared.store.wiring import open_store
from shared.task import COMPLETED, state_of
from tests.support.redis_server import RedisServer

MODES = {
    "green": ("asyncio", "bench.agents:idle"),
    "threads": ("threads", "bench.agents:idle_blocking"),
}
START_TIMEOUT = 300.0


@dataclass
class Idle:
    mode: str
    calls: int
    running_after: float  # seconds from the first send until every call was running
    cpu_share: float  # of one core, while all run
    threads: int
    rss_mib: float
    completed_after: float  # seconds from the calls' end until all were completed
    completed: int

    def line(self) -> str:
        return (
            f"{self.mode:<8} {self.calls:>6} {self.running_after:8.1f} {100 * self.cpu_share:8.2f}%"
            f" {self.threads:>8} {self.rss_mib:8.1f} {self.completed_after:10.1f}"
            f" {self.completed:>9}"
        )


HEADER = "mode      calls  all in    idle CPU  threads  RSS MiB  completed  of calls"


def working_count(settings: dict[str, str]) -> int:
    return len(open_store(Settings.from_env(settings)).stale(float("inf")))


def run(mode: str, calls: int, seconds: float, hold: float) -> Idle:
    pool, agent = MODES[mode]
    redis = RedisServer().start()
    worker: CeleryWorker | None = None
    try:
        settings = {
            "TOOLNEXUS_STORE": f"{redis.url}/1",
            "TOOLNEXUS_BROKER_URL": f"{redis.url}/0",
            "TOOLNEXUS_QUEUE": f"bench-idle-{uuid.uuid4().hex[:6]}",
            "TOOLNEXUS_POOL": pool,
            "TOOLNEXUS_CONCURRENCY": str(calls),
            "TOOLNEXUS_RUN": agent,
            "TOOLNEXUS_LOG_LEVEL": "WARNING",
        }
        worker = CeleryWorker("worker", settings, name=f"bench-idle-{mode}")
        pid = worker.process.pid
        end_at = time.time() + hold
        start, ids = submit_directly(settings, f"{end_at:.6f}", calls)
        deadline = time.monotonic() + START_TIMEOUT
        while working_count(settings) < calls:
            if time.monotonic() > deadline or worker.process.poll() is not None:
                raise RuntimeError(f"{mode}: not all running: {worker.output()[-2000:]}")
            time.sleep(0.2)
        running_after = time.time() - start
        time.sleep(1.0)  # the last claims' saves and acknowledgements settle
        before, at = cpu_seconds(pid), time.monotonic()
        time.sleep(seconds)
        share = (cpu_seconds(pid) - before) / (time.monotonic() - at)
        if time.time() > end_at:
            raise RuntimeError(f"{mode}: the calls ended before the measurement did: raise --hold")
        threads = len(os.listdir(f"/proc/{pid}/task"))
        rss = rss_kib(pid) / 1024
        finished = wait_finished(settings, ids)
        done = sum(1 for task in finished if task is not None and state_of(task) == COMPLETED)
        completed_after = time.time() - end_at
        return Idle(mode, calls, running_after, share, threads, rss, completed_after, done)
    finally:
        if worker is not None:
            worker.stop()
        redis.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--hold", type=float, default=90.0, help="seconds each call waits")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", choices=sorted(MODES), action="append")
    args = parser.parse_args()
    exit_on_sigterm()
    print(f"load average at start: {os.getloadavg()}")
    print(HEADER)
    for _ in range(args.rounds):
        for mode in args.only or list(MODES):
            print(run(mode, args.calls, args.seconds, args.hold).line(), flush=True)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
