"""A worker's death survived: how soon a killed run runs again, where a
checkpointed generator goes on from, and what attempts cost when nothing dies.

    python3 bench/attempts.py [--trials 10] [--tasks 100] [--rounds 2]

Starts a private redis-server and real Celery workers (prefork) running
`tests.support.agents:stepping`, which logs the start of every step of every
attempt with its process id, with `TOOLNEXUS_MAX_ATTEMPTS=3` and the default
retry backoff (1 s, each delay drawn from the upper half of its interval):

1. A pool process killed: a task is started on an idle worker, its pool
   process SIGKILLed (the worker lives), and the time from the kill to the
   next attempt's first step is taken (p50, p99, max over `--trials`); the
   task then runs to its end before the next trial. The aim: 2 s at p99.
2. A whole worker killed: two one-process workers and a beat
   (`TOOLNEXUS_STALE_AFTER=5`, a reap every second); the worker running the
   task is SIGKILLed with its pool and started again after the trial. The
   time from the kill to the next attempt's first step, against the aim of
   `TOOLNEXUS_STALE_AFTER` + 5 s.
3. A 60-step generator with a checkpoint after every step, its pool
   process killed once its first attempt began step 40: the step the next
   attempt starts at (the aim: the step killed in, or the one after, never
   earlier).
4. The happy path: two fleets, one with `TOOLNEXUS_MAX_ATTEMPTS=1`, one with
   3, each a worker `-c 2` on a queue of its own; `--tasks` tasks of four
   progress messages each (`tests.support.agents:scripted`, "steps 0"), sent
   at once, until all are completed, fleet after fleet in a round (the order
   swapped each round); the ratio of the medians.

Everything shares one 2-core machine: read the ratios and the aims, not the
absolute times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import (
    PYTHONPATH,
    ROOT,
    CeleryWorker,
    exit_on_sigterm,
    percentile,
    stop_group,
)
from shared.broker.dispatch import CeleryDispatcher
from shared.settings import Settings
from shared.stores.redis.store import redis_store
from shared.task import new_task, state_of, text_message
from tests.support.redis_server import RedisServer

WORKER = "worker"
CELERY = (sys.executable, "-m", "celery", "-A", WORKER)


def base_env(redis_url: str, queue: str, runs: Path, **extra: str) -> dict[str, str]:
    return {
        "TOOLNEXUS_BROKER_URL": redis_url,
        "TOOLNEXUS_STORE": redis_url,
        "TOOLNEXUS_QUEUE": queue,
        "TOOLNEXUS_RUN": "tests.support.agents:stepping",
        "TOOLNEXUS_MAX_ATTEMPTS": "3",
        "TOOLNEXUS_HEARTBEAT": "1",
        "TOOLNEXUS_STALE_AFTER": "5",
        "TOOLNEXUS_REAP_EVERY": "1",
        "TOOLNEXUS_TIME_LIMIT": "120",
        "SCRIPTED_RUNS": str(runs),
        **extra,
    }


class Fleet:
    """Workers on one queue of a private Redis, and a way to send them tasks."""

    def __init__(self, redis_url: str, runs: Path, **extra: str) -> None:
        self.queue = f"bench-attempts-{uuid.uuid4().hex[:8]}"
        self.env = base_env(redis_url, self.queue, runs, **extra)
        self.settings = Settings.from_env(self.env)
        self.store = redis_store(redis_url)
        self.dispatcher = CeleryDispatcher(self.settings)
        self.runs = runs
        self.workers: dict[str, CeleryWorker] = {}

    def start(self, name: str, *flags: str) -> CeleryWorker:
        worker = CeleryWorker(WORKER, self.env, name, ["-P", "prefork", *flags])
        self.workers[name] = worker
        return worker

    def submit(self, text: str) -> str:
        task = self.store.save(new_task(text_message("user", text)))
        self.dispatcher.enqueue(task["id"])
        return str(task["id"])

    def close(self) -> None:
        for worker in self.workers.values():
            worker.stop()
        self.dispatcher.close()


def logged(runs: Path, prefix: str) -> list[tuple[str, int]]:
    """The (line, process id) of every logged step starting with `prefix`."""
    try:
        lines = runs.read_text().splitlines()
    except FileNotFoundError:
        return []
    found = []
    for line in lines:
        text, _, pid = line.rpartition("\t")
        if text.startswith(prefix):
            found.append((text, int(pid)))
    return found


def until(probe: Callable[[], object], timeout: float, what: str, every: float = 0.005) -> object:
    deadline = time.monotonic() + timeout
    while not (found := probe()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(every)
    return found


def killed_to_running(fleet: Fleet, tag: str, kill: Callable[[int], None]) -> float:
    """Start a task on an idle fleet, kill what runs it (`kill(pid of its
    pool process)`), and time the kill to the next attempt's first step;
    then wait for the task to complete, so the next trial finds the fleet
    idle again."""
    task_id = fleet.submit(f"30 0.1 {tag}")
    first = until(partial(logged, fleet.runs, f"{tag} attempt 1 step 3"), 60, f"{tag} step 3")
    assert isinstance(first, list)
    killed_at = time.monotonic()
    kill(first[0][1])
    until(partial(logged, fleet.runs, f"{tag} attempt 2 "), 120, f"{tag}'s second attempt")
    seconds = time.monotonic() - killed_at
    until(partial(completed, fleet, task_id), 120, f"{tag} completed", every=0.05)
    return seconds


def summary(values: list[float]) -> str:
    return (
        f"p50 {statistics.median(values):.2f} s, p99 {percentile(values, 0.99):.2f} s,"
        f" max {max(values):.2f} s over {len(values)}"
    )


def pool_processes(redis_url: str, folder: Path, trials: int) -> list[float]:
    fleet = Fleet(redis_url, folder / "pool-runs")
    try:
        fleet.start("pool", "-c", "2")
        return [
            killed_to_running(fleet, f"pool{n}", lambda pid: os.kill(pid, 9)) for n in range(trials)
        ]
    finally:
        fleet.close()


def whole_workers(redis_url: str, folder: Path, trials: int) -> list[float]:
    fleet = Fleet(redis_url, folder / "worker-runs")
    beat = None
    try:
        for name in ("one", "two"):
            fleet.start(name, "-c", "1")
        beat = subprocess.Popen(
            [*CELERY, "beat", "-l", "INFO", "-s", str(folder / "beat-schedule")],
            cwd=ROOT,
            env={**os.environ, **PYTHONPATH, **fleet.env},
            stdout=subprocess.DEVNULL,
            stderr=(folder / "beat.log").open("w"),
            start_new_session=True,
        )
        times = []
        for n in range(trials):
            killed: list[str] = []
            times.append(
                killed_to_running(fleet, f"worker{n}", partial(kill_worker, fleet, killed))
            )
            for name in killed:  # started again for the next trial
                fleet.workers[name].stop()
                fleet.start(name, "-c", "1")
        return times
    finally:
        if beat is not None:
            stop_group(beat)
        fleet.close()


def kill_worker(fleet: Fleet, killed: list[str], pid: int) -> None:
    """SIGKILL the worker whose pool process `pid` is, with its pool."""
    for name, worker in fleet.workers.items():
        if _parent(pid) == worker.process.pid:
            os.killpg(worker.process.pid, 9)
            killed.append(name)
            return
    raise RuntimeError(f"no worker runs process {pid}")


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[1])


def checkpoints(redis_url: str, folder: Path, trials: int) -> list[tuple[int, int]]:
    """(the last step the first attempt began, the first step of the second)."""
    fleet = Fleet(redis_url, folder / "checkpoint-runs")
    found = []
    try:
        fleet.start("steps", "-c", "2")
        for n in range(trials):
            tag = f"steps{n}"
            fleet.submit(f"60 0.05 {tag}")
            began = until(partial(logged, fleet.runs, f"{tag} attempt 1 step 40"), 60, "step 40")
            assert isinstance(began, list)
            os.kill(began[0][1], 9)
            until(partial(logged, fleet.runs, f"{tag} attempt 2 "), 60, "the second attempt")
            first = [text for text, _ in logged(fleet.runs, f"{tag} attempt 1 ")]
            second = [text for text, _ in logged(fleet.runs, f"{tag} attempt 2 ")]
            found.append((int(first[-1].split()[-1]), int(second[0].split()[-1])))
        return found
    finally:
        fleet.close()


def completed(fleet: Fleet, task_id: str) -> bool:
    return state_of(fleet.store.get(task_id)) == "completed"


def happy_path(redis_url: str, folder: Path, tasks: int, rounds: int) -> dict[str, list[float]]:
    fleets = {
        attempts: Fleet(
            redis_url,
            folder / f"happy-{attempts}",
            TOOLNEXUS_MAX_ATTEMPTS=attempts,
            TOOLNEXUS_RUN="tests.support.agents:scripted",
        )
        for attempts in ("1", "3")
    }
    seconds: dict[str, list[float]] = {name: [] for name in fleets}
    try:
        for name, fleet in fleets.items():
            fleet.start(f"happy{name}", "-c", "2")
        for number in range(rounds):
            order = list(fleets) if number % 2 == 0 else list(reversed(fleets))
            for name in order:
                fleet = fleets[name]
                started = time.monotonic()
                ids = [fleet.submit("steps 0 hello") for _ in range(tasks)]
                for task_id in ids:
                    until(partial(completed, fleet, task_id), 120, f"task {task_id}", every=0.01)
                seconds[name].append(time.monotonic() - started)
        return seconds
    finally:
        for fleet in fleets.values():
            fleet.close()


def main() -> int:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    redis = RedisServer().start()
    folder = Path(f"/tmp/bench-attempts-{uuid.uuid4().hex[:8]}")
    folder.mkdir()
    try:
        print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
        pool = pool_processes(redis.url, folder, options.trials)
        print(f"pool process killed -> next attempt running: {summary(pool)} (aim: p99 <= 2 s)")
        whole = whole_workers(redis.url, folder, options.trials)
        print(
            f"whole worker killed -> next attempt running: {summary(whole)}"
            " (aim: <= STALE_AFTER 5 s + 5 s)",
            flush=True,
        )
        resumed = checkpoints(redis.url, folder, options.trials)
        starts = ", ".join(f"{killed}->{first}" for killed, first in resumed)
        never_earlier = all(first >= killed for killed, first in resumed)
        print(
            f"checkpointed generator killed in step k -> first step of the next attempt: {starts}"
            f" (never earlier than k: {never_earlier})",
            flush=True,
        )
        happy = happy_path(redis.url, folder, options.tasks, options.rounds)
        one, three = (statistics.median(happy[name]) for name in ("1", "3"))
        print(
            f"happy path, {options.tasks} tasks of four progress messages, median of"
            f" {options.rounds} rounds: MAX_ATTEMPTS=1 {one:.2f} s, =3 {three:.2f} s,"
            f" ratio {three / one:.2f}x (each round: "
            + ", ".join(f"{a:.2f}/{b:.2f}" for a, b in zip(happy["1"], happy["3"], strict=True))
            + ")"
        )
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        redis.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
