"""compose.sentinel.yaml on a real Docker engine. Opt-in, like tests/test_compose_docker.py.

    tools/docker-engine.sh
    python3 -m pytest -m docker -s tests/test_compose_sentinel.py

Builds the image and runs `compose --profile sentinel up` with the override:
compose's Redis as the first master, a replica and three Sentinels, every
service on the Sentinels with TOOLNEXUS_REDIS_MIN_REPLICAS=1. It sends
tasks, kills the master's container, sees the Sentinels promote the
replica (named by its compose name, as the services reach it), starts the
killed container again (what an orchestrator does), and sees the fleet
take and complete tasks on the promoted master, every task from before the
kill still there, and `/readyz` naming the new master.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from shared.task import COMPLETED
from tests.support.a2a import call, get_task, send_text, wait_ready, wait_state
from tests.support.docker_project import Project, compose_project, docker
from tests.support.polling import wait_for

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

# Keep current, here and in docs/test-suite.md, whenever it runs.
LAST_RUN = "2026-12-02, passed 1 of 1 (140 s)"
OPT_IN = (
    "OPT-IN, NOT RUN (CI neither): builds the image and runs compose.sentinel.yaml on a Docker"
    " engine, minutes; run: tools/docker-engine.sh && python3 -m pytest -m docker -s"
    f" tests/test_compose_sentinel.py; last run {LAST_RUN}; see docs/test-suite.md"
)


@pytest.fixture(scope="module")
def project(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Project]:
    settings = {"TOOLNEXUS_RUN": "examples.agents:slow", "COMPOSE_PROFILES": "sentinel"}
    with compose_project(
        request, tmp_path_factory, settings, OPT_IN, files=("compose.sentinel.yaml",)
    ) as made:
        yield made


def master_named(project: Project) -> str | None:
    """The master's host as the first Sentinel names it."""
    try:
        named = project.compose(
            "exec", "-T", "sentinel-1", "redis-cli", "-p", "26379",
            "sentinel", "get-master-addr-by-name", "toolnexus",
        )  # fmt: skip
    except AssertionError:
        return None  # the Sentinel is starting
    return named.split()[0] if named.split() else None


def sent(project: Project, text: str) -> str | None:
    """A send's task id; None while the store refuses it (the failover)."""
    message = {"role": "user", "messageId": text, "parts": [{"kind": "text", "text": text}]}
    try:
        reply = call(project.web_url, "message/send", {"message": message})
    except (requests.RequestException, ValueError):
        return None
    return str(reply["result"]["id"]) if "result" in reply else None


def test_a_killed_master_is_replaced_and_no_task_is_lost(project: Project) -> None:
    with project.timed("build"):
        project.compose("build", timeout=1800)
    with project.timed("up -d, web ready"):
        project.compose("up", "-d", timeout=900)
        wait_ready(project.web_url, timeout=300)
    wait_for(lambda: master_named(project) == "redis", timeout=120, what="the Sentinels ready")
    before = [send_text(project.web_url, f"0.1 before {n}")["id"] for n in range(5)]
    for task_id in before:
        assert wait_state(project.web_url, task_id, timeout=60)["status"]["state"] == COMPLETED
    node = requests.get(f"{project.web_url}/readyz", timeout=10).json()["node"]
    assert node.startswith("redis:6379 (master 'toolnexus' via Sentinel)"), node

    with project.timed("master killed to replica promoted"):
        docker("kill", project.containers("redis")[0])
        wait_for(
            lambda: master_named(project) == "redis-replica",
            timeout=180,
            interval=1,
            what="the Sentinels to promote redis-replica",
        )
    with project.timed("old master started to a task completed"):
        project.compose("start", "redis", timeout=300)
        task_id = wait_for(
            lambda: sent(project, "0.1 after the failover"),
            timeout=300,
            interval=1,
            what="a send to be acknowledged on the promoted master",
        )
        assert wait_state(project.web_url, task_id, timeout=120)["status"]["state"] == COMPLETED
    for task_id in before:
        assert get_task(project.web_url, task_id)["status"]["state"] == COMPLETED
    node = requests.get(f"{project.web_url}/readyz", timeout=10).json()["node"]
    assert node.startswith("redis-replica:6379 "), node
