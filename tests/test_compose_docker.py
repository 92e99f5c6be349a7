"""compose.yaml on a real Docker engine. Opt-in: it takes minutes.

    tools/docker-engine.sh                  # once per machine: an engine, base-image stand-ins
    python3 -m pytest -m docker -s          # -s shows the timings

It builds the image, runs `compose up` with a .env as an operator writes it,
sends tasks through web, scales to three workers and sees them in Flower's
API, kills a worker container mid-task and sees beat's reaper fail its task,
then runs `down` and `up` and finds every task as it was. Short liveness
settings in its .env make the reaper act within seconds. Everything runs as
its own compose project, torn down with its volumes at the end.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from shared.task import COMPLETED, FAILED, WORKING
from tests.support.a2a import get_task, send_text, wait_ready, wait_state
from tests.support.docker_project import Project, compose_project, docker
from tests.support.polling import wait_for

# Builds and `compose up` take minutes on a vfs engine; the suite default is 120 s.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

# Opt-in, CI included: building the image and running compose takes 3 to 5
# minutes on a vfs engine, half the suite's 10-minute budget, and CI has no
# engine. So the reason says so, with the last recorded run (keep it current,
# here and in docs/test-suite.md, whenever you run it).
LAST_RUN = "2026-12-02, passed 6 of 6 (97 s, the image built just before)"
OPT_IN = (
    "OPT-IN, NOT RUN (CI neither): builds the image and runs compose.yaml on a Docker engine,"
    f" minutes; run: tools/docker-engine.sh && python3 -m pytest -m docker -s;"
    f" last run {LAST_RUN}; see docs/test-suite.md"
)
STALE_AFTER = 5.0
SERVICES = ("redis", "web", "worker", "beat", "flower")


@pytest.fixture(scope="module")
def project(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Project]:
    settings = {
        "TOOLNEXUS_RUN": "examples.agents:slow",
        "TOOLNEXUS_HEARTBEAT": "1",
        "TOOLNEXUS_STALE_AFTER": f"{STALE_AFTER:g}",
        "TOOLNEXUS_REAP_EVERY": "1",
        "TOOLNEXUS_CONCURRENCY": "1",
    }
    with compose_project(request, tmp_path_factory, settings, OPT_IN) as made:
        yield made


@pytest.fixture(scope="module")
def tasks_before_restart() -> dict[str, str]:
    """Task id -> the state it reached, for the restart to find again."""
    return {}


def test_the_image_builds(project: Project) -> None:
    with project.timed("build"):
        project.compose("build", timeout=1800)
    docker("image", "inspect", "toolnexus-serve:latest")


def test_up_makes_every_service_healthy_on_loopback_ports(project: Project) -> None:
    with project.timed("up -d, web ready"):
        project.compose("up", "-d", timeout=900)
        wait_ready(project.web_url, timeout=300)
    every = {name: project.containers(name) for name in SERVICES}
    assert all(len(ids) == 1 for ids in every.values()), every

    def unhealthy() -> dict[str, str]:
        states = {name: project.health(ids[0]) for name, ids in every.items()}
        return {name: state for name, state in states.items() if state != "healthy"}

    # The worker's first check runs 30 s after it starts; beat's is the reaper's record.
    with project.timed("then every health check passing"):
        wait_for(lambda: unhealthy() == {}, timeout=300, what="every service healthy")
    for name, port in (("web", 8080), ("flower", 5555)):
        published = docker("port", every[name][0], str(port)).split()
        assert published and all(address.startswith("127.0.0.1:") for address in published)


def test_tasks_sent_through_web_complete(
    project: Project, tasks_before_restart: dict[str, str]
) -> None:
    sent = [send_text(project.web_url, f"0.2 task {n}")["id"] for n in range(5)]
    for number, task_id in enumerate(sent):
        done = wait_state(project.web_url, task_id, timeout=60)
        assert done["status"]["state"] == COMPLETED
        assert done["artifacts"][0]["parts"][0]["text"] == f"slept 0.2s: task {number}"
        tasks_before_restart[task_id] = COMPLETED


def test_flower_sees_three_workers_after_scaling(project: Project) -> None:
    with project.timed("scale to 3 workers, all in flower"):
        project.compose("up", "-d", "--scale", "worker=3", timeout=900)
        containers = project.containers("worker")
        assert len(containers) == 3
        expected = {f"worker@{container[:12]}" for container in containers}

        def online() -> set[str] | None:
            workers = set(project.flower("/api/workers?refresh=1"))
            return workers if expected <= workers else None

        wait_for(online, timeout=180, what=f"flower to list {sorted(expected)}")
    for page in ("/api/workers", "/metrics", "/healthcheck"):
        assert requests.get(f"{project.flower_url}{page}", timeout=10).status_code == 401


def test_a_killed_workers_task_is_failed_by_beats_reaper(
    project: Project, tasks_before_restart: dict[str, str]
) -> None:
    task_id = send_text(project.web_url, "600 outlives its worker")["id"]
    wait_state(project.web_url, task_id, frozenset({WORKING}), timeout=60)

    def running_on() -> str | None:
        info = project.flower(f"/api/task/info/{task_id}")
        worker = info.get("worker") or ""
        return worker.removeprefix("worker@") if info.get("state") == "STARTED" else None

    host = wait_for(running_on, timeout=60, what="flower to say which worker runs the task")
    container = next(c for c in project.containers("worker") if c.startswith(host))
    with project.timed("worker killed to task failed"):
        docker("kill", container)
        failed = wait_state(project.web_url, task_id, frozenset({FAILED}), timeout=60)
    text = failed["status"]["message"]["parts"][0]["text"]
    assert text == f"worker lost: no heartbeat for {STALE_AFTER:g} s"
    assert "reaper: failed 1 stale task" in project.compose("logs", "--no-color", "beat")
    tasks_before_restart[task_id] = FAILED


def test_down_and_up_keep_every_task(
    project: Project, tasks_before_restart: dict[str, str]
) -> None:
    assert len(tasks_before_restart) == 6, "the earlier tests ran"
    with project.timed("down"):
        project.compose("down", timeout=600)
    assert project.containers("web") == []
    with project.timed("up -d again, web ready"):
        project.compose("up", "-d", timeout=900)
        wait_ready(project.web_url, timeout=300)
    found = {task_id: get_task(project.web_url, task_id) for task_id in tasks_before_restart}
    assert {i: t["status"]["state"] for i, t in found.items()} == tasks_before_restart
