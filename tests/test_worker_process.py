"""`celery -A worker worker|beat` as real subprocesses: start-up checks, a
worker killed with SIGKILL mid-task and its task failed by the reaper on
beat, and the time limit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.broker.dispatch import CeleryDispatcher
from shared.events import to_state
from shared.settings import Settings
from shared.stores.redis.store import RedisStore, redis_store
from shared.task import Task, new_task, state_of, text_message
from shared.transitions import transition
from tests.support.agents import runs_of
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent


def clean_env(**variables: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLNEXUS_")}
    return {**env, **variables, "PYTHONPATH": str(ROOT)}


def celery(*args: str, env: dict[str, str], log: Path | None = None) -> subprocess.Popen[bytes]:
    output = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed by the child
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "worker", *args],
        cwd=ROOT,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT if log else subprocess.PIPE,
        start_new_session=True,  # its own process group, so one killpg takes its children too
    )


@pytest.mark.parametrize(
    ("command", "variable", "value"),
    [
        ("worker", "TOOLNEXUS_STALE_AFTER", "soon"),
        ("worker", "TOOLNEXUS_RUN", "examples.agents:no_such_agent"),
        ("beat", "TOOLNEXUS_STORE", "ftp://nowhere"),
        ("worker", "TOOLNEXUS_ON_TASK", "not a reference"),
        ("worker", "TOOLNEXUS_STORE", "no_such_module_x:store"),
    ],
)
def test_a_bad_setting_stops_start_up_with_one_line(
    command: str, variable: str, value: str
) -> None:
    process = celery(command, env=clean_env(**{variable: value}))
    _, stderr = process.communicate(timeout=60)

    lines = stderr.decode().strip().splitlines()
    assert process.returncode == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"toolnexus: {variable}")


class Fleet:
    """Worker and beat subprocesses on one private Redis; all killed at the end."""

    def __init__(self, redis_url: str, tmp_path: Path, store_url: str | None = None) -> None:
        self.queue = f"toolnexus-kill-{uuid.uuid4().hex[:8]}"
        self.env = clean_env(
            TOOLNEXUS_BROKER_URL=redis_url,
            TOOLNEXUS_STORE=store_url or redis_url,
            TOOLNEXUS_QUEUE=self.queue,
            TOOLNEXUS_RUN="examples.agents:slow",
            TOOLNEXUS_HEARTBEAT="0.2",
            TOOLNEXUS_STALE_AFTER="1",
            TOOLNEXUS_REAP_EVERY="0.3",
            TOOLNEXUS_TIME_LIMIT="2",
        )
        self.settings = Settings.from_env(self.env)
        self.store: RedisStore = redis_store(store_url or redis_url)
        self.dispatcher = CeleryDispatcher(self.settings)
        self.tmp_path = tmp_path
        self.processes: list[subprocess.Popen[bytes]] = []

    def worker(self, name: str, *extra: str) -> subprocess.Popen[bytes]:
        args = ["worker", "-n", f"{name}@%h", "-c", "2", "-P", "prefork", "-l", "INFO"]
        process = celery(*args, *extra, env=self.env, log=self.tmp_path / f"{name}.log")
        self.processes.append(process)
        return process

    def submit(self, text: str) -> str:
        task = self.store.save(new_task(text_message("user", text)))
        self.dispatcher.enqueue(task["id"])
        return str(task["id"])

    def wait(self, task_id: str, state: str, timeout: float = 30) -> Task:
        def probe() -> Task | None:
            task = self.store.get(task_id)
            return task if task and state_of(task) == state else None

        return wait_for(probe, timeout=timeout, what=f"task {task_id} {state}\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in self.tmp_path.glob("*.log"))

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        self.dispatcher.close()
        self.store.client.close()


@pytest.fixture
def fleet(redis_url: str, tmp_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(redis_url, tmp_path)
    yield fleet
    fleet.close()


def reason(task: Task) -> str:
    return str(task["status"]["message"]["parts"][0]["text"])


def test_a_killed_worker_s_task_is_failed_by_the_reaper_on_beat(fleet: Fleet) -> None:
    victim = fleet.worker("victim")
    task_id = fleet.submit("60 never finishes")
    fleet.wait(task_id, "working")

    def beats() -> Any:
        return fleet.store.client.zscore("toolnexus:working", task_id)

    first = beats()
    wait_for(lambda: beats() != first, what="a heartbeat from the running task")

    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(10)
    assert state_of(fleet.store.get(task_id) or {}) == "working"  # nobody left to say otherwise

    fleet.worker("survivor", "-B", "-s", str(fleet.tmp_path / "beat-schedule"))
    task = fleet.wait(task_id, "failed")

    assert reason(task) == "worker lost: no heartbeat for 1 s"
    assert fleet.store.stale(float("inf")) == []  # it left the working index

    # the same worker enforces the time limit with Celery's soft limit
    slow = fleet.submit("30 too slow")
    timed_out = fleet.wait(slow, "failed")
    assert reason(timed_out) == "timed out after 2 s"


def test_cancel_terminates_a_running_task_and_nothing_overwrites_it(fleet: Fleet) -> None:
    fleet.worker("canceler")
    task_id = fleet.submit("20 slow")
    fleet.wait(task_id, "working")

    # what the front end's CancelTask does: the stored state first, then revoke
    canceled = transition(fleet.store, task_id, to_state("canceled"))
    assert canceled.applied
    fleet.dispatcher.revoke(
        task_id
    )  # the pool process running it is killed (worker.runtime.cancel)

    # the worker goes on serving, and the canceled task never changes again
    after = fleet.submit("0.01 next")
    fleet.wait(after, "completed")
    task = fleet.store.get(task_id)
    assert task is not None
    assert state_of(task) == "canceled"
    assert "artifacts" not in task
    assert fleet.store.stale(float("inf")) == []
    assert f"canceled: terminated {task_id}" in fleet.logs()  # the worker stopped the run itself


def inspected_conf(fleet: Fleet, name: str) -> dict[str, Any]:
    """The configuration the running worker `name` reports over the broker."""
    control = fleet.dispatcher.app.control

    def probe() -> dict[str, Any] | None:
        replies = control.inspect(timeout=2).conf(with_defaults=True) or {}
        return next((conf for node, conf in replies.items() if node.startswith(f"{name}@")), None)

    return wait_for(probe, timeout=60, what=f"{name} to answer inspect conf\n{fleet.logs()}")


def test_the_running_worker_has_the_settings_the_guarantees_rest_on(fleet: Fleet) -> None:
    fleet.worker("configured")
    conf = inspected_conf(fleet, "configured")
    # A crashed pool process gives its message back; a dead worker strands
    # nothing it had not started; Redis redelivers only once the hard limit
    # has surely ended the run (TOOLNEXUS_TIME_LIMIT=2 here).
    assert conf["task_acks_late"] is True
    assert conf["task_reject_on_worker_lost"] is True
    assert conf["worker_prefetch_multiplier"] == 1
    assert conf["task_soft_time_limit"] == 2
    assert conf["task_time_limit"] == 2 + 30
    assert conf["broker_transport_options"]["visibility_timeout"] == 2 + 30 + 60


# Opt-in (`-m slow`): it runs for most of a minute (38-40 s in the suite). A pool process dying
# under a task, failed by the reaper, is checked in CI by
# test_a_killed_worker_s_task_is_failed_by_the_reaper_on_beat, and the hard
# limit's setting by test_the_running_worker_has_the_settings_the_guarantees_rest_on.
@pytest.mark.slow
def test_the_hard_time_limit_kills_the_pool_process_and_the_reaper_fails_the_task(
    fleet: Fleet,
) -> None:
    # The agent blocks the soft limit's signal; the hard limit kills its process.
    fleet.env["TOOLNEXUS_RUN"] = "tests.support.agents:scripted"
    schedule = str(fleet.tmp_path / "beat-schedule")
    fleet.worker("limited", "--soft-time-limit=1", "--time-limit=3", "-B", "-s", schedule)
    task_id = fleet.submit("stubborn 600")
    fleet.wait(task_id, "working")

    task = fleet.wait(task_id, "failed", timeout=90)

    assert reason(task) == "worker lost: no heartbeat for 1 s"
    assert "TimeLimitExceeded" in fleet.logs()  # Celery's hard limit, not the soft one
    assert fleet.store.stale(float("inf")) == []
    after = fleet.submit("sleep 0.01 next")  # a new pool process serves on
    assert fleet.wait(after, "completed")["artifacts"][0]["parts"][0]["text"] == "ran: next"


def test_a_claim_that_meets_a_store_outage_is_retried_by_celery(
    redis_url: str, tmp_path: Path
) -> None:
    # The store on a Redis of its own, down while the broker is up; no beat
    # runs, so only Celery's retry of the claim can get the task run.
    store_server = RedisServer(appendonly=True).start()
    fleet = Fleet(redis_url, tmp_path, store_url=store_server.url)
    runs = str(tmp_path / "runs")
    fleet.env.update(TOOLNEXUS_RUN="tests.support.agents:scripted", SCRIPTED_RUNS=runs)
    try:
        task_id = fleet.submit("retried-claim")  # saved and queued, no worker yet
        store_server.stop()
        fleet.worker("retrying")  # its claim meets the outage
        wait_for(lambda: "Retry in" in fleet.logs(), timeout=60, what="Celery to retry the claim")
        assert runs_of(runs, "retried-claim") == []
        store_server.start()
        task = fleet.wait(task_id, "completed", timeout=90)
        assert task["artifacts"][0]["parts"][0]["text"] == "ran: retried-claim"
        assert len(runs_of(runs, "retried-claim")) == 1
    finally:
        fleet.close()
        store_server.close()
