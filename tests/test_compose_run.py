"""Proof of compose.yaml without Docker: each project service's own command,
with the environment its container would get (its `.env` through env_file,
then its `environment`), run as a local process.

Redis is a private redis-server run with compose's own redis arguments (its
password and memory policy); the `redis` host is mapped to it and web and
flower get free ports; everything else is the file's. A task sent through
web completes, Flower's API reports it, every page of Flower wants the login,
beat's reaper fails a task left stale, and each health check passes, and
beat's fails once beat stops.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import requests

from shared.broker.dispatcher import is_resend
from shared.task import COMPLETED, FAILED, WORKING, new_task, text_message
from tests.support.a2a import readyz, send_text, wait_ready, wait_state
from tests.support.compose import ROOT, Backends, LocalStack, compose_redis, dotenv_for, local_stack
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer
from tests.support.shortcuts import with_status

FLOWER_LOGIN = ("admin", "secret")
# The .env: short liveness settings so the reaper acts within the test, and
# a name to see that .env reaches the services; the rest is compose.yaml's.
DOTENV = {
    "FLOWER_BASIC_AUTH": ":".join(FLOWER_LOGIN),
    "TOOLNEXUS_NAME": "compose-run-agent",
    "TOOLNEXUS_HEARTBEAT": "0.5",
    "TOOLNEXUS_STALE_AFTER": "2",
    "TOOLNEXUS_REAP_EVERY": "1",
    "TOOLNEXUS_CONCURRENCY": "2",
}
SERVICES = ("web", "worker", "beat", "flower")


# On every broker x store combination the matrix selects (tests/support/matrix.py):
# with RabbitMQ, compose.rabbitmq.yaml's wiring is what the services get.
pytestmark = pytest.mark.matrix(ci=True)


@pytest.fixture(scope="module")
def redis_and_stack(
    tmp_path_factory: pytest.TempPathFactory, backends: Backends
) -> Iterator[tuple[RedisServer, LocalStack]]:
    folder = tmp_path_factory.mktemp("compose")
    with local_stack(folder, DOTENV, appendonly=True, backends=backends) as started:
        for name in SERVICES:
            started[1].start(name)
        yield started


@pytest.fixture(scope="module")
def stack(redis_and_stack: tuple[RedisServer, LocalStack]) -> LocalStack:
    return redis_and_stack[1]


def health_check(
    stack: LocalStack, name: str, replace: dict[str, str] | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run the service's compose health check here, as its container would."""
    kind, *rest = stack.services[name]["healthcheck"]["test"]
    for old, new in (replace or {}).items():
        rest = [part.replace(old, new) for part in rest]
    command = ["sh", "-c", rest[0]] if kind == "CMD-SHELL" else rest
    environment = {
        **os.environ,
        **stack.environments.get(name, {}),
        "HOSTNAME": socket.gethostname(),
        **env,
    }
    return subprocess.run(command, env=environment, cwd=ROOT, capture_output=True, text=True)


def on_the_redis_store(stack: LocalStack) -> None:
    """For a test about compose's Redis as the store: elsewhere (the matrix's
    PostgreSQL store) there is nothing of it to look at."""
    if stack.backends.store_kind != "redis":
        pytest.skip(f"about the Redis store; this stack's is {stack.backends.store_kind}")


def alive(stack: LocalStack) -> None:
    for process in stack.processes.values():
        assert process.alive(), f"{process.name} exited:\n{process.output()[-3000:]}"


def test_web_becomes_ready_and_its_health_check_passes(stack: LocalStack) -> None:
    def ready() -> bool:
        alive(stack)
        return readyz(stack.web_url) == 200

    wait_for(ready, timeout=30, what="web /readyz")
    ports = {"127.0.0.1:8080": f"127.0.0.1:{stack.web_port}"}
    assert health_check(stack, "web", ports).returncode == 0


def test_settings_in_dotenv_reach_web_and_no_example_skill(stack: LocalStack) -> None:
    card = requests.get(f"{stack.web_url}/.well-known/agent-card.json", timeout=5).json()
    assert card["name"] == "compose-run-agent"
    assert "hello-world" not in [skill.get("id") for skill in card.get("skills", [])]


def test_redis_wants_the_password_and_never_evicts(
    redis_and_stack: tuple[RedisServer, LocalStack],
) -> None:
    server, stack = redis_and_stack
    on_the_redis_store(stack)
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=server.port).ping()
    client = redis.Redis.from_url(stack.store_url)  # the URL the services were given
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    # Its health check authenticates and wants PONG; a wrong password fails it.
    cli = {"redis-cli": f"redis-cli -p {server.port}"}
    password = stack.dotenv["REDIS_PASSWORD"]
    assert health_check(stack, "redis", cli, REDISCLI_AUTH=password).returncode == 0
    assert health_check(stack, "redis", cli, REDISCLI_AUTH="wrong").returncode != 0


def test_a_full_redis_refuses_writes_and_keeps_every_key() -> None:
    """compose's redis arguments with a memory limit: an OOM error, not eviction."""
    server = compose_redis(dotenv_for({"REDIS_MAXMEMORY": "2mb"}, "pw")).start()
    try:
        client = redis.Redis.from_url(server.url)
        written = 0
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            while written < 10_000:  # 2 MB fills long before 10 000 x 4 KiB
                client.set(f"task:{written}", b"x" * 4096)
                written += 1
        assert written > 0
        assert client.dbsize() == written  # nothing written was evicted
    finally:
        server.close()


@pytest.fixture(scope="module")
def completed_task(stack: LocalStack) -> dict[str, Any]:
    """A task sent through web (A2A 0.3, non-blocking) and polled to completion."""
    wait_ready(stack.web_url)
    task = send_text(stack.web_url, "through compose")
    assert task["status"]["state"] == "submitted"
    done = wait_state(stack.web_url, task["id"])
    alive(stack)
    return done


def test_a_task_sent_through_web_completes(completed_task: dict[str, Any]) -> None:
    assert completed_task["status"]["state"] == COMPLETED
    assert completed_task["artifacts"][0]["parts"][0]["text"] == "ran: through compose"


def test_a_finished_task_expires_after_the_default_ttl(
    stack: LocalStack, completed_task: dict[str, Any]
) -> None:
    on_the_redis_store(stack)
    client = redis.Redis.from_url(stack.store_url)
    keys = list(client.scan_iter(match=f"*{completed_task['id']}*"))
    assert keys
    ttls = [client.ttl(key) for key in keys]
    assert all(0 < ttl <= 7 * 24 * 3600 for ttl in ttls), ttls


def test_the_worker_health_check_pings_its_own_node(stack: LocalStack) -> None:
    assert wait_for(
        lambda: health_check(stack, "worker").returncode == 0, timeout=40, what="worker ping"
    )


def test_flower_shows_the_task_and_its_state(
    stack: LocalStack, completed_task: dict[str, Any]
) -> None:
    # Under load the worker can start after beat's reaper (stale after 2 s
    # here) has sent the task again: the resend, listed under an id of its
    # own that starts with the task's, is then the message that runs it.
    task_id = completed_task["id"]

    def seen() -> dict[str, Any] | None:
        alive(stack)
        try:
            reply = requests.get(f"{stack.flower_url}/api/tasks", auth=FLOWER_LOGIN, timeout=5)
        except requests.ConnectionError:
            return None
        tasks = reply.json() if reply.status_code == 200 else {}
        messages = [
            entry
            for celery_id, entry in tasks.items()
            if celery_id == task_id or is_resend(celery_id, task_id)
        ]
        return next((entry for entry in messages if entry.get("state") == "SUCCESS"), None)

    entry = wait_for(seen, timeout=40, what="flower to report the task")
    assert entry["name"] == "toolnexus.fulfil"


@pytest.mark.parametrize("page", ["/api/tasks", "/metrics", "/healthcheck", "/"])
def test_every_flower_page_wants_the_login(stack: LocalStack, page: str) -> None:
    def anonymous_status() -> int | None:
        alive(stack)
        try:
            return requests.get(f"{stack.flower_url}{page}", timeout=5).status_code
        except requests.ConnectionError:
            return None

    assert wait_for(anonymous_status, timeout=40, what="flower to answer") == 401
    wrong = requests.get(f"{stack.flower_url}{page}", auth=("admin", "wrong"), timeout=5)
    assert wrong.status_code == 401
    allowed = requests.get(f"{stack.flower_url}{page}", auth=FLOWER_LOGIN, timeout=5)
    assert allowed.status_code == 200
    if page == "/metrics":
        assert "flower_events_total" in allowed.text


def test_the_flower_health_check_logs_in(stack: LocalStack) -> None:
    wait_for(lambda: health_check(stack, "flower").returncode == 0, timeout=40, what="flower")
    refused = health_check(stack, "flower", FLOWER_BASIC_AUTH="admin:wrong")
    assert refused.returncode == 1 and "401" in refused.stdout


def test_beat_reaps_a_task_left_stale(stack: LocalStack) -> None:
    # A task a dead worker left in `working`: no heartbeat comes after this
    # save, so it is stale once TOOLNEXUS_STALE_AFTER (2 s) has passed.
    orphan = stack.open_store().save(with_status(new_task(text_message("user", "orphan")), WORKING))
    failed = wait_state(stack.web_url, orphan["id"], frozenset({FAILED}))
    assert "worker lost" in failed["status"]["message"]["parts"][0]["text"]

    def logged() -> bool:
        alive(stack)  # beat logs the reap after its write; its output comes through a pipe
        return "reaper: failed 1 stale task" in stack.processes["beat"].output()

    wait_for(logged, timeout=30, what="beat's line about the reap")


def test_beat_keeps_a_schedule_and_no_pid_file(stack: LocalStack) -> None:
    def scheduled() -> bool:
        alive(stack)  # beat writes its schedule once it has started, which a loaded host delays
        return any(stack.beat_dir.glob("celerybeat-schedule*"))

    wait_for(scheduled, timeout=30, what="beat's schedule file")
    assert not (stack.beat_dir / "celerybeat.pid").exists()


def test_the_beat_health_check_passes_and_fails_once_beat_stops(stack: LocalStack) -> None:
    passed = health_check(stack, "beat")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert passed.stdout.startswith("beat: healthy")
    stack.stop("beat")
    try:
        # 3 x TOOLNEXUS_REAP_EVERY (1 s) after the reaper's last run.
        failed = wait_for(
            lambda: (check := health_check(stack, "beat")).returncode == 1 and check,
            timeout=30,
            what="beat's health check to fail",
        )
        assert failed.stdout.startswith("beat: unhealthy: the reaper last ran")
    finally:
        stack.start("beat")
    wait_for(
        lambda: health_check(stack, "beat").returncode == 0, timeout=30, what="beat healthy again"
    )
