"""The I/O modes (TOOLNEXUS_POOL=threads|asyncio) as real `celery -A worker
worker` subprocesses on a private Redis: many I/O calls run by one process
at once, the worker's own time limit, a cancel reaching a running coroutine, a
worker SIGKILLed with many calls in flight, warm shutdown, streaming agents'
events in order, and the loop-lag warning.

The agents (tests/support/waiting_agents.py) wait for a go file, so the
tests decide when calls end instead of racing a sleep; deadlines are
generous, and nothing here asserts a timing.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.broker.dispatch import CeleryDispatcher
from shared.events import to_state
from shared.settings import Settings
from shared.stores.redis.store import RedisStore, redis_store
from shared.task import (
    CANCELED,
    COMPLETED,
    FAILED,
    SUBMITTED,
    TERMINAL_STATES,
    Task,
    new_task,
    state_of,
    text_message,
)
from shared.transitions import transition
from tests.support.compose import compose, container_environment, dotenv_for
from tests.support.polling import wait_for
from tests.support.waiting_agents import Gate
from worker.runtime.app import create_celery

ROOT = Path(__file__).resolve().parent.parent
AGENTS = "tests.support.waiting_agents"
# Each mode with the kind of agent it is for; async agents run on the
# process's loop in both, so the cancel test runs a coroutine in each.
MODES = [("threads", "_blocking"), ("asyncio", "")]
MODE_IDS = [mode for mode, _ in MODES]
CELERY = ("celery", "-A", "worker")
SHORT_VISIBILITY = "tests.support.short_visibility"


class IOFleet:
    """I/O-mode workers (and beat) on one private Redis, killed at the end."""

    def __init__(self, redis_url: str, tmp_path: Path, pool: str, **variables: str) -> None:
        self.tmp_path = tmp_path
        self.marks = tmp_path / "marks"
        self.marks.mkdir()
        self.go = tmp_path / "go"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLNEXUS_")}
        self.env = {
            **env,
            "PYTHONPATH": str(ROOT),
            "TOOLNEXUS_BROKER_URL": redis_url,
            "TOOLNEXUS_STORE": redis_url,
            "TOOLNEXUS_QUEUE": f"toolnexus-io-{uuid.uuid4().hex[:8]}",
            "TOOLNEXUS_POOL": pool,
            "TOOLNEXUS_HEARTBEAT": "0.2",
            "TOOLNEXUS_STALE_AFTER": "2",
            "TOOLNEXUS_REAP_EVERY": "0.3",
            **variables,
        }
        self.settings = Settings.from_env(self.env)
        self.store: RedisStore = redis_store(redis_url)
        self.dispatcher = CeleryDispatcher(self.settings)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(
        self, name: str, *args: str, launcher: tuple[str, ...] = CELERY
    ) -> subprocess.Popen[bytes]:
        log = open(self.tmp_path / f"{name}.log", "ab")  # noqa: SIM115 - the child's
        process = subprocess.Popen(
            [sys.executable, "-m", *launcher, *args],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = process
        return process

    def worker(self, name: str, visibility: float | None = None) -> subprocess.Popen[bytes]:
        """A worker; with `visibility`, one whose broker redelivers messages
        left unacknowledged that many seconds (tests.support.short_visibility)."""
        launcher = CELERY if visibility is None else (SHORT_VISIBILITY, str(visibility))
        return self.start(name, "worker", "-n", f"{name}@%h", "-l", "INFO", launcher=launcher)

    def beat(self) -> subprocess.Popen[bytes]:
        schedule = str(self.tmp_path / "beat-schedule")
        return self.start("beat", "beat", "-s", schedule, "-l", "INFO")

    def submit(self, count: int, **gate: Any) -> list[str]:
        text = Gate(go=str(self.go), marks=str(self.marks), **gate).encode()
        ids = []
        for _ in range(count):
            task = self.store.save(new_task(text_message("user", text)))
            self.dispatcher.enqueue(task["id"])
            ids.append(str(task["id"]))
        return ids

    def open_gate(self) -> None:
        self.go.write_text("go")

    def marked(self, what: str) -> Counter[str]:
        """How many marks of `what` each task left (`done` counts runs to the end)."""
        return Counter(path.name.split(".")[0] for path in self.marks.glob(f"*.{what}*"))

    def states(self, ids: list[str]) -> Counter[str]:
        return Counter(state_of(self.store.get(i) or {"status": {"state": "?"}}) for i in ids)

    def wait_states(self, ids: list[str], *states: str, timeout: float = 60) -> dict[str, Task]:
        def probe() -> dict[str, Task] | None:
            tasks = {i: self.store.get(i) for i in ids}
            if all(t is not None and state_of(t) in states for t in tasks.values()):
                return {i: t for i, t in tasks.items() if t is not None}
            return None

        what = f"{len(ids)} task(s) {'/'.join(states)}: {self.states(ids)}\n{self.logs()}"
        return wait_for(probe, timeout=timeout, what=what)

    def wait_working(self, ids: list[str], timeout: float = 60) -> None:
        """Every task claimed and its call started: all running at once."""

        def probe() -> bool:
            working = set(self.store.stale(float("inf")))
            return set(ids) <= working and set(ids) <= set(self.marked("started"))

        wait_for(
            probe, timeout=timeout, what=f"{len(ids)} I/O calls running at once\n{self.logs()}"
        )

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:] for p in self.tmp_path.glob("*.log"))

    def close(self) -> None:
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):  # the group may be gone
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        self.dispatcher.close()
        self.store.client.close()


@pytest.fixture
def fleet(redis_url: str, tmp_path: Path) -> Iterator[Any]:
    made: list[IOFleet] = []

    def make(pool: str, **variables: str) -> IOFleet:
        made.append(IOFleet(redis_url, tmp_path, pool, **variables))
        return made[-1]

    yield make
    for each in made:
        each.close()


def pool_stats(io: IOFleet) -> dict[str, Any]:
    """What Flower's worker page shows of the one worker's pool (`inspect stats`)."""
    app = create_celery(io.settings)
    stats = wait_for(lambda: app.control.inspect(timeout=5).stats(), timeout=30, what="stats")
    (pool_info,) = [node["pool"] for node in stats.values()]
    return dict(pool_info)


def reason(task: Task) -> str:
    return str(task["status"]["message"]["parts"][0]["text"])


@pytest.mark.parametrize(("pool", "kind"), MODES, ids=MODE_IDS)
def test_one_process_runs_many_io_calls_at_once(fleet: Any, pool: str, kind: str) -> None:
    calls = 40
    io = fleet(pool, TOOLNEXUS_RUN=f"{AGENTS}:gated{kind}", TOOLNEXUS_CONCURRENCY=str(calls))
    io.worker("many")
    ids = io.submit(calls)

    io.wait_working(ids)
    pool_info = pool_stats(io)
    assert pool_info["toolnexus-io-calls"] == calls
    assert pool_info["max-concurrency"] == calls

    io.open_gate()
    io.wait_states(ids, COMPLETED)
    assert io.marked("done") == dict.fromkeys(ids, 1)
    assert io.store.stale(float("inf")) == []


@pytest.mark.parametrize("pool", MODE_IDS)
def test_an_async_agent_s_io_calls_take_no_thread(fleet: Any, pool: str) -> None:
    """Each delivery of an async agent runs as a green job on the loop
    (worker.engine.green_jobs): Celery's executor starts no thread for it,
    and the process's threads do not grow with its I/O calls."""
    calls = 120
    io = fleet(pool, TOOLNEXUS_RUN=f"{AGENTS}:gated", TOOLNEXUS_CONCURRENCY=str(calls))
    worker = io.worker("green")
    ids = io.submit(calls)

    io.wait_working(ids)
    pool_info = pool_stats(io)
    assert pool_info["toolnexus-io-calls"] == calls
    assert pool_info["threads"] == 0  # no pool thread parked for a call
    os_threads = len(os.listdir(f"/proc/{worker.pid}/task"))
    assert os_threads < calls // 3, os_threads

    io.open_gate()
    io.wait_states(ids, COMPLETED)
    assert io.marked("done") == dict.fromkeys(ids, 1)
    assert io.store.stale(float("inf")) == []


@pytest.mark.parametrize(("pool", "kind"), MODES, ids=MODE_IDS)
def test_the_worker_enforces_the_time_limit(fleet: Any, pool: str, kind: str) -> None:
    io = fleet(pool, TOOLNEXUS_RUN=f"{AGENTS}:gated{kind}", TOOLNEXUS_TIME_LIMIT="1")
    io.worker("limited")
    ids = io.submit(3)  # the gate never opens: each would wait for ever

    tasks = io.wait_states(ids, FAILED)
    assert {reason(task) for task in tasks.values()} == {"timed out after 1 s"}
    if kind == "":  # a coroutine is cancelled; a blocking call's result is dropped
        wait_for(lambda: set(io.marked("cancelled")) == set(ids), timeout=30, what="cancels")
    io.open_gate()  # the blocking calls now return: their results must not count
    later = io.submit(1, then=0.0)
    io.wait_states(later, COMPLETED)
    assert io.states(ids) == {FAILED: 3}
    assert set(io.marked("done")) <= set(later) | (set(ids) if kind else set())


@pytest.mark.parametrize("pool", MODE_IDS)
def test_a_cancel_reaches_the_running_coroutine(fleet: Any, pool: str) -> None:
    io = fleet(pool, TOOLNEXUS_RUN=f"{AGENTS}:gated")
    io.worker("canceler")
    ids = io.submit(5)
    io.wait_working(ids)
    target, others = ids[0], ids[1:]

    # What the front end's CancelTask does: the stored state, then a revoke.
    assert transition(io.store, target, to_state(CANCELED)).applied
    io.dispatcher.revoke(target)

    wait_for(lambda: target in io.marked("cancelled"), timeout=15, what=f"cancel\n{io.logs()}")
    io.open_gate()
    io.wait_states(others, COMPLETED)
    task = io.store.get(target)
    assert task is not None and state_of(task) == CANCELED
    assert "artifacts" not in task
    assert target not in io.marked("done")
    assert set(io.marked("cancelled")) == {target}


@pytest.mark.parametrize(("pool", "kind"), MODES, ids=MODE_IDS)
def test_a_killed_worker_s_calls_are_all_failed_and_none_runs_twice(
    fleet: Any, pool: str, kind: str
) -> None:
    calls = 30
    io = fleet(pool, TOOLNEXUS_RUN=f"{AGENTS}:gated{kind}", TOOLNEXUS_CONCURRENCY=str(calls))
    victim = io.worker("victim")
    ids = io.submit(calls)
    io.wait_working(ids)

    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(10)
    io.beat()
    tasks = io.wait_states(ids, *TERMINAL_STATES)
    assert {reason(task) for task in tasks.values()} == {"worker lost: no heartbeat for 2 s"}
    assert io.store.stale(float("inf")) == []

    # A worker that comes up afterwards (and gets any redelivered message)
    # runs none of them again.
    io.worker("survivor")
    io.open_gate()
    later = io.submit(1)
    io.wait_states(later, COMPLETED)
    assert io.states(ids) == {FAILED: calls}
    assert set(io.marked("done")) == set(later)


# Opt-in (-m slow): minutes of the suite; the SIGKILL test above checks the
# same "worker lost" outcome in both modes in CI.
@pytest.mark.slow
@pytest.mark.parametrize(("pool", "kind"), MODES, ids=MODE_IDS)
def test_a_killed_worker_s_messages_are_redelivered_and_each_task_ends_as_promised(
    fleet: Any, pool: str, kind: str
) -> None:
    """docs/workers.md: a dead worker's running tasks are failed by the
    reaper (`worker lost`), and their messages come back after the
    visibility timeout; those copies find the task failed (or still
    `working`) and do nothing. What it had not taken stays queued and runs
    once elsewhere."""
    calls, waiting = 30, 10
    io = fleet(pool, TOOLNEXUS_RUN=f"{AGENTS}:gated{kind}", TOOLNEXUS_CONCURRENCY=str(calls))
    victim = io.worker("victim")
    running = io.submit(calls)
    io.wait_working(running)
    queued = io.submit(waiting)  # the victim takes all it prefetches: these stay queued

    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(10)
    started = set(io.marked("started"))
    io.open_gate()
    io.beat()
    survivor = io.worker("survivor", visibility=3)

    tasks = io.wait_states(running + queued, *TERMINAL_STATES, timeout=90)
    lost = {i for i in tasks if i in started}
    assert set(running) <= lost
    assert {reason(tasks[i]) for i in lost} == {"worker lost: no heartbeat for 2 s"}
    assert {state_of(tasks[i]) for i in set(tasks) - lost} == {COMPLETED}

    # Every message the victim had taken came back to the survivor, which found
    # its task taken and left it alone.
    log = Path(io.tmp_path / "survivor.log")

    def redelivered() -> set[str]:
        text = log.read_text(errors="replace")
        found = (re.search(rf"task {i}: is (failed|working), not submitted", text) for i in running)
        return {i for i, match in zip(running, found, strict=True) if match}

    wait_for(
        lambda: redelivered() == set(running),
        timeout=60,
        what=f"the survivor to get every message again: {len(redelivered())}\n{io.logs()}",
    )
    assert survivor.poll() is None
    assert io.states(running) == {FAILED: calls}
    assert io.marked("done") == dict.fromkeys(set(tasks) - lost, 1)  # none ran twice
    assert io.store.stale(float("inf")) == []  # none stuck working


@pytest.mark.parametrize(("pool", "kind"), MODES, ids=MODE_IDS)
def test_warm_shutdown_lets_io_calls_finish_and_leaves_the_rest_queued(
    fleet: Any, pool: str, kind: str
) -> None:
    io = fleet(pool, TOOLNEXUS_RUN=f"{AGENTS}:gated{kind}", TOOLNEXUS_CONCURRENCY="4")
    first = io.worker("leaving")
    ids = io.submit(7, then=0.5)
    wait_for(lambda: len(io.marked("started")) == 4, timeout=60, what=f"4 running\n{io.logs()}")
    running = sorted(io.marked("started"))

    first.send_signal(signal.SIGTERM)  # Celery's warm shutdown
    io.open_gate()
    assert first.wait(60) == 0
    assert io.states(running) == {COMPLETED: 4}
    queued = [i for i in ids if i not in running]
    assert io.states(queued) == {SUBMITTED: 3}  # back in the queue, never started

    io.worker("next")
    io.wait_states(queued, COMPLETED)
    assert io.marked("done") == dict.fromkeys(ids, 1)


@pytest.mark.parametrize(("pool", "kind"), MODES, ids=MODE_IDS)
def test_streaming_agents_events_stay_in_order_under_concurrency(
    fleet: Any, pool: str, kind: str
) -> None:
    calls, items = 20, 15
    io = fleet(pool, TOOLNEXUS_RUN=f"{AGENTS}:counting{kind}", TOOLNEXUS_CONCURRENCY=str(calls))
    io.worker("streamer")
    ids = io.submit(calls, items=items)
    io.wait_working(ids)
    io.open_gate()
    io.wait_states(ids, COMPLETED)

    for task_id in ids:
        logged = io.store.events(task_id, 0)
        numbers = [number for number, _ in logged]
        assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
        texts = [
            part["text"]
            for _, event in logged
            if event.get("kind") == "status-update" and event["status"]["state"] == "working"
            for part in (event["status"].get("message") or {}).get("parts", [])
        ]
        assert texts == [str(n) for n in range(items)], (task_id, texts)
        assert logged[-1][1]["status"]["state"] == COMPLETED


def test_an_agent_blocking_the_loop_is_warned_about(fleet: Any) -> None:
    io = fleet("asyncio", TOOLNEXUS_RUN=f"{AGENTS}:hogging")
    io.worker("hog")
    task = io.store.save(new_task(text_message("user", "1.5")))
    io.dispatcher.enqueue(task["id"])
    io.wait_states([str(task["id"])], COMPLETED)
    wait_for(lambda: "event loop stalled" in io.logs(), timeout=15, what="the lag warning")


def test_compose_documents_an_opt_in_worker_for_waiting_agents() -> None:
    dotenv = dotenv_for({}, None)
    services = compose(dotenv)["services"]
    io_worker, worker = services["worker-io"], services["worker"]
    assert io_worker["profiles"] == ["io"]  # `docker compose up` alone leaves it out
    assert io_worker["command"][:2] == worker["command"][:2] == ["toolnexus-serve", "worker"]
    assert io_worker["env_file"] == worker["env_file"] == ".env"
    settings = Settings.from_env(container_environment(io_worker, dotenv))
    assert settings.pool == "asyncio" and (settings.concurrency or 0) >= 100
    # Warm shutdown waits for I/O calls up to the time limit.
    assert io_worker["stop_grace_period"] == worker["stop_grace_period"]


def test_a_pool_forced_with_dash_p_is_warned_about(fleet: Any) -> None:
    io = fleet("asyncio", TOOLNEXUS_RUN=f"{AGENTS}:gated")
    io.start("forced", "worker", "-n", "forced@%h", "-P", "solo", "-l", "INFO")
    wait_for(
        lambda: "the command line chose" in io.logs(), timeout=60, what=f"warning\n{io.logs()}"
    )
    assert "TOOLNEXUS_POOL=asyncio needs the IOPool pool" in io.logs()
