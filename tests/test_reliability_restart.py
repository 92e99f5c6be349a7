"""Restart durability: with the file store and with the Redis store, tasks
saved before the front end and workers restart are all answered after it.

Tasks that were running when the processes stopped are not lost either:
the reaper fails them once their heartbeat is stale.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared.task import COMPLETED, FAILED, WORKING
from tests.support.a2a import get_task, send_text, wait_ready, wait_state
from tests.support.compose import ROOT, LocalStack, local_stack
from tests.support.redis_server import RedisServer, free_port

FINISHED, RUNNING = 12, 2
LIVENESS = {
    "TOOLNEXUS_HEARTBEAT": "0.2",
    "TOOLNEXUS_STALE_AFTER": "1.5",
    "TOOLNEXUS_REAP_EVERY": "0.3",
}


def report(kind: str, sent: int, answered: int, states: dict[str, int]) -> None:
    print(f"\n{kind}: sent {sent}, answered after restart {answered}, states {states}")


class Embedded:
    """`toolnexus-serve` as a subprocess on a free port."""

    def __init__(self, store: str, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [
            sys.executable, "-m", "worker.embedded",
            "--port", str(self.port), "--store", store,
            "--run", "examples.agents:slow", "--grace", "0.2",
        ]  # fmt: skip
        self.log = log.open("wb")
        self.process = subprocess.Popen(
            command, cwd=ROOT, env={**os.environ, **LIVENESS}, stdout=self.log, stderr=self.log
        )
        wait_ready(self.url)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(20)
        self.log.close()
        return code


def send_batch(url: str) -> tuple[list[str], list[str]]:
    """FINISHED quick tasks run to completion, and RUNNING long ones left working."""
    quick = [send_text(url, f"0.01 quick {n}")["id"] for n in range(FINISHED)]
    for task_id in quick:
        wait_state(url, task_id)
    slow = [send_text(url, f"600 slow {n}")["id"] for n in range(RUNNING)]
    for task_id in slow:
        wait_state(url, task_id, frozenset({WORKING}))
    return quick, slow


def check_after_restart(url: str, quick: list[str], slow: list[str], before: dict) -> dict:
    states: dict[str, int] = {}
    for task_id in quick:
        task = get_task(url, task_id)
        assert task == before[task_id]  # finished tasks come back unchanged
        states[task["status"]["state"]] = states.get(task["status"]["state"], 0) + 1
    for task_id in slow:
        task = wait_state(url, task_id, frozenset({FAILED}), timeout=20)
        assert "worker lost" in task["status"]["message"]["parts"][0]["text"]
        states[FAILED] = states.get(FAILED, 0) + 1
    return states


def test_file_store_survives_a_restart_of_the_embedded_server(tmp_path: Path) -> None:
    store = f"file:{tmp_path / 'tasks'}"
    server = Embedded(store, tmp_path / "first.log")
    quick, slow = send_batch(server.url)
    before = {task_id: get_task(server.url, task_id) for task_id in quick}
    assert {t["status"]["state"] for t in before.values()} == {COMPLETED}
    assert server.stop() == 0

    again = Embedded(store, tmp_path / "second.log")
    try:
        states = check_after_restart(again.url, quick, slow, before)
    finally:
        assert again.stop() == 0
    report("file store", FINISHED + RUNNING, sum(states.values()), states)
    assert sum(states.values()) == FINISHED + RUNNING


@pytest.fixture
def redis_stack(tmp_path: Path) -> Iterator[tuple[RedisServer, LocalStack]]:
    overrides = {**LIVENESS, "TOOLNEXUS_RUN": "examples.agents:slow", "TOOLNEXUS_CONCURRENCY": "4"}
    with local_stack(tmp_path, overrides, appendonly=True) as started:
        yield started


def test_redis_store_survives_a_restart_of_web_workers_and_redis(
    redis_stack: tuple[RedisServer, LocalStack],
) -> None:
    redis, stack = redis_stack
    for name in ("web", "worker", "beat"):
        stack.start(name)
    wait_ready(stack.web_url)
    quick, slow = send_batch(stack.web_url)
    before = {task_id: get_task(stack.web_url, task_id) for task_id in quick}

    # Everything goes down: the worker running the slow tasks dies outright.
    stack.processes["worker"].kill()
    for name in ("web", "worker", "beat"):
        stack.stop(name)
    redis.stop()
    redis.start()  # same port, same append-only file
    for name in ("web", "worker", "beat"):
        stack.start(name)
    wait_ready(stack.web_url)

    states = check_after_restart(stack.web_url, quick, slow, before)
    report("redis store", FINISHED + RUNNING, sum(states.values()), states)
    assert sum(states.values()) == FINISHED + RUNNING
