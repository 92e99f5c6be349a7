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
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from shared.redis_store import redis_store
from shared.task import FAILED, WORKING, new_task, text_message, with_status
from tests.support.compose import (
    ROOT,
    ServiceProcess,
    compose,
    localised,
    service_environment,
)
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer, free_port

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


@dataclass
class Stack:
    services: dict[str, Any]
    processes: dict[str, ServiceProcess]
    web_url: str
    flower_url: str
    store_url: str
    environments: dict[str, dict[str, str]]
    beat_dir: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    try:
        redis = RedisServer(appendonly=True).start()
    except FileNotFoundError as error:
        pytest.fail(f"redis-server is needed to run compose services: {error}")
    folder = tmp_path_factory.mktemp("compose")
    services = compose(OVERRIDES)["services"]
    web_port, flower_port = free_port(), free_port()
    extra = {
        "web": {"GUNICORN_CMD_ARGS": f"--bind=127.0.0.1:{web_port}"},
        "flower": {"FLOWER_PORT": str(flower_port), "FLOWER_ADDRESS": "127.0.0.1"},
    }
    # The image's WORKDIR is the project (gunicorn.conf.py); beat has its own.
    workdirs = {"web": ROOT, "worker": ROOT, "flower": ROOT, "beat": folder / "beat"}
    workdirs["beat"].mkdir()
    environments = {
        name: {**localised(service_environment(services[name]), redis.url), **extra.get(name, {})}
        for name in ("web", "worker", "beat", "flower")
    }
    processes: dict[str, ServiceProcess] = {}
    try:
        for name, environment in environments.items():
            processes[name] = ServiceProcess(
                name, services[name]["command"], environment, workdirs[name], folder / f"{name}.log"
            )
        yield Stack(
            services=services,
            processes=processes,
            web_url=f"http://127.0.0.1:{web_port}",
            flower_url=f"http://127.0.0.1:{flower_port}",
            store_url=environments["web"]["TOOLNEXUS_STORE"],
            environments=environments,
            beat_dir=workdirs["beat"],
        )
    finally:
        for process in processes.values():
            process.stop()
        redis.close()


def rpc(stack: Stack, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    reply = requests.post(f"{stack.web_url}/", json=body, timeout=10).json()
    assert "error" not in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


def health_check(stack: Stack, name: str, ports: dict[str, str] | None = None) -> int:
    """Run the service's compose health check here, as its container would."""
    test = list(stack.services[name]["healthcheck"]["test"])
    kind, rest = test[0], test[1:]
    for old, new in (ports or {}).items():
        rest = [part.replace(old, new) for part in rest]
    command = ["sh", "-c", rest[0]] if kind == "CMD-SHELL" else rest
    environment = {**stack.environments[name], "HOSTNAME": socket.gethostname()}
    result = subprocess.run(
        command, env={**os.environ, **environment}, cwd=ROOT, capture_output=True, timeout=60
    )
    return result.returncode


def alive(stack: Stack) -> None:
    for process in stack.processes.values():
        assert process.alive(), f"{process.name} exited:\n{process.output()[-3000:]}"


def test_web_becomes_ready_and_its_health_check_passes(stack: Stack) -> None:
    def ready() -> bool:
        alive(stack)
        try:
            return requests.get(f"{stack.web_url}/readyz", timeout=2).status_code == 200
        except requests.ConnectionError:
            return False

    wait_for(ready, timeout=30, what="web /readyz")
    port = stack.web_url.rsplit(":", 1)[1]
    assert health_check(stack, "web", {"127.0.0.1:8080": f"127.0.0.1:{port}"}) == 0


@pytest.fixture(scope="module")
def completed_task(stack: Stack) -> dict[str, Any]:
    """A task sent through web (A2A 0.3, non-blocking) and polled to completion."""
    message = {
        "role": "user",
        "messageId": str(uuid.uuid4()),
        "parts": [{"kind": "text", "text": "through compose"}],
    }
    task = rpc(stack, "message/send", {"message": message, "configuration": {"blocking": False}})
    assert task["status"]["state"] == "submitted"

    def finished() -> dict[str, Any] | None:
        alive(stack)
        current = rpc(stack, "tasks/get", {"id": task["id"]})
        return current if current["status"]["state"] == "completed" else None

    return wait_for(finished, timeout=30, what="the task to complete")


def test_a_task_sent_through_web_completes(completed_task: dict[str, Any]) -> None:
    assert completed_task["artifacts"][0]["parts"][0]["text"] == "ran: through compose"


def test_the_worker_health_check_pings_its_own_node(stack: Stack) -> None:
    assert wait_for(lambda: health_check(stack, "worker") == 0, timeout=40, what="worker ping")


def test_flower_shows_the_task_and_its_state(stack: Stack, completed_task: dict[str, Any]) -> None:
    task_id = completed_task["id"]

    def seen() -> dict[str, Any] | None:
        alive(stack)
        try:
            reply = requests.get(f"{stack.flower_url}/api/tasks", auth=FLOWER_LOGIN, timeout=5)
        except requests.ConnectionError:
            return None
        tasks = reply.json() if reply.status_code == 200 else {}
        entry = tasks.get(task_id)
        return entry if entry and entry.get("state") == "SUCCESS" else None

    entry = wait_for(seen, timeout=40, what="flower to report the task")
    assert entry["name"] == "toolnexus.fulfil"
    assert requests.get(f"{stack.flower_url}/api/tasks", timeout=5).status_code == 401
    port = stack.flower_url.rsplit(":", 1)[1]
    assert health_check(stack, "flower", {"127.0.0.1:5555": f"127.0.0.1:{port}"}) == 0
    metrics = requests.get(f"{stack.flower_url}/metrics", auth=FLOWER_LOGIN, timeout=5)
    assert metrics.status_code == 200 and "flower_events_total" in metrics.text


def test_beat_reaps_a_task_left_stale(stack: Stack) -> None:
    # A task a dead worker left in `working`: its last heartbeat is at time 0.
    store = redis_store(stack.store_url, clock=lambda: 0.0)
    orphan = store.save(with_status(new_task(text_message("user", "orphan")), WORKING))

    def reaped() -> dict[str, Any] | None:
        alive(stack)
        current = rpc(stack, "tasks/get", {"id": orphan["id"]})
        return current if current["status"]["state"] == FAILED else None

    failed = wait_for(reaped, timeout=30, what="beat's reaper to fail the stale task")
    assert "worker lost" in failed["status"]["message"]["parts"][0]["text"]
    assert "reap" in stack.processes["worker"].output().lower()


def test_beat_keeps_no_pid_file(stack: Stack) -> None:
    alive(stack)
    assert any(stack.beat_dir.glob("celerybeat-schedule*"))
    assert not (stack.beat_dir / "celerybeat.pid").exists()
