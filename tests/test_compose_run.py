"""Proof of compose.yaml without Docker: each project service's own command,
with that service's own environment, run as a local process.

The `redis` host is mapped to a private redis-server and web and flower get
free ports; everything else is the file's. A task sent through web
completes, Flower's API reports it, beat's reaper fails a task left stale,
and each service's health check passes.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from shared.redis_store import redis_store
from shared.task import COMPLETED, FAILED, WORKING, new_task, text_message, with_status
from tests.support.a2a import readyz, send_text, wait_state
from tests.support.compose import ROOT, LocalStack, local_stack
from tests.support.polling import wait_for

FLOWER_LOGIN = ("admin", "secret")
# Short liveness settings so the reaper acts within the test; the rest are
# compose.yaml's defaults.
OVERRIDES = {
    "FLOWER_BASIC_AUTH": ":".join(FLOWER_LOGIN),
    "TOOLNEXUS_HEARTBEAT": "0.5",
    "TOOLNEXUS_STALE_AFTER": "2",
    "TOOLNEXUS_REAP_EVERY": "1",
    "TOOLNEXUS_CONCURRENCY": "2",
}
SERVICES = ("web", "worker", "beat", "flower")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with local_stack(tmp_path_factory.mktemp("compose"), OVERRIDES, appendonly=True) as started:
        for name in SERVICES:
            started[1].start(name)
        yield started[1]


def health_check(stack: LocalStack, name: str, ports: dict[str, str] | None = None) -> int:
    """Run the service's compose health check here, as its container would."""
    kind, *rest = stack.services[name]["healthcheck"]["test"]
    for old, new in (ports or {}).items():
        rest = [part.replace(old, new) for part in rest]
    command = ["sh", "-c", rest[0]] if kind == "CMD-SHELL" else rest
    environment = {**os.environ, **stack.environments[name], "HOSTNAME": socket.gethostname()}
    return subprocess.run(command, env=environment, cwd=ROOT, capture_output=True).returncode


def alive(stack: LocalStack) -> None:
    for process in stack.processes.values():
        assert process.alive(), f"{process.name} exited:\n{process.output()[-3000:]}"


def test_web_becomes_ready_and_its_health_check_passes(stack: LocalStack) -> None:
    def ready() -> bool:
        alive(stack)
        return readyz(stack.web_url) == 200

    wait_for(ready, timeout=30, what="web /readyz")
    ports = {"127.0.0.1:8080": f"127.0.0.1:{stack.web_port}"}
    assert health_check(stack, "web", ports) == 0


@pytest.fixture(scope="module")
def completed_task(stack: LocalStack) -> dict[str, Any]:
    """A task sent through web (A2A 0.3, non-blocking) and polled to completion."""
    task = send_text(stack.web_url, "through compose")
    assert task["status"]["state"] == "submitted"
    done = wait_state(stack.web_url, task["id"])
    alive(stack)
    return done


def test_a_task_sent_through_web_completes(completed_task: dict[str, Any]) -> None:
    assert completed_task["status"]["state"] == COMPLETED
    assert completed_task["artifacts"][0]["parts"][0]["text"] == "ran: through compose"


def test_the_worker_health_check_pings_its_own_node(stack: LocalStack) -> None:
    assert wait_for(lambda: health_check(stack, "worker") == 0, timeout=40, what="worker ping")


def test_flower_shows_the_task_and_its_state(
    stack: LocalStack, completed_task: dict[str, Any]
) -> None:
    def seen() -> dict[str, Any] | None:
        alive(stack)
        try:
            reply = requests.get(f"{stack.flower_url}/api/tasks", auth=FLOWER_LOGIN, timeout=5)
        except requests.ConnectionError:
            return None
        tasks = reply.json() if reply.status_code == 200 else {}
        entry = tasks.get(completed_task["id"])
        return entry if entry and entry.get("state") == "SUCCESS" else None

    entry = wait_for(seen, timeout=40, what="flower to report the task")
    assert entry["name"] == "toolnexus.fulfil"
    assert requests.get(f"{stack.flower_url}/api/tasks", timeout=5).status_code == 401
    ports = {"127.0.0.1:5555": f"127.0.0.1:{stack.flower_port}"}
    assert health_check(stack, "flower", ports) == 0
    metrics = requests.get(f"{stack.flower_url}/metrics", auth=FLOWER_LOGIN, timeout=5)
    assert metrics.status_code == 200 and "flower_events_total" in metrics.text


def test_beat_reaps_a_task_left_stale(stack: LocalStack) -> None:
    # A task a dead worker left in `working`: its last heartbeat is at time 0.
    store = redis_store(stack.store_url, clock=lambda: 0.0)
    orphan = store.save(with_status(new_task(text_message("user", "orphan")), WORKING))
    failed = wait_state(stack.web_url, orphan["id"], frozenset({FAILED}))
    assert "worker lost" in failed["status"]["message"]["parts"][0]["text"]
    alive(stack)
    assert "reaper: failed 1 stale task" in stack.processes["beat"].output()


def test_beat_keeps_a_schedule_and_no_pid_file(stack: LocalStack) -> None:
    alive(stack)
    assert any(stack.beat_dir.glob("celerybeat-schedule*"))
    assert not (stack.beat_dir / "celerybeat.pid").exists()
