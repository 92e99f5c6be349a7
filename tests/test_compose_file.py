"""compose.yaml, the Dockerfile and .env.example, checked without a Docker engine.

The structure is checked here; tests/test_compose_run.py runs each
service's command as a local process to show the commands work.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from shared import Settings
from tests.support.compose import (
    COMPOSE_FILE,
    ROOT,
    compose,
    interpolate,
    raw_compose,
    service_environment,
)
from tests.support.redis_server import ci

ENV = {"FLOWER_BASIC_AUTH": "admin:secret"}


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return dict(compose(ENV)["services"])


def seconds(duration: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(
        float(amount) * units[unit] for amount, unit in re.findall(r"([\d.]+)(ms|h|m|s)", duration)
    )


def test_the_five_services(services: dict[str, Any]) -> None:
    assert set(services) == {"redis", "web", "worker", "beat", "flower"}


def test_redis_persists_and_stays_private(services: dict[str, Any]) -> None:
    redis = services["redis"]
    assert redis["image"].startswith("redis:")
    assert "--appendonly" in redis["command"]
    assert redis["command"][redis["command"].index("--appendonly") + 1] == "yes"
    assert any(volume.endswith(":/data") for volume in redis["volumes"])
    assert "redis-data" in raw_compose()["volumes"]
    assert "ports" not in redis
    assert "redis-cli" in redis["healthcheck"]["test"]


def test_web_serves_with_gunicorn_and_checks_readiness(services: dict[str, Any]) -> None:
    web = services["web"]
    assert web["command"] == ["gunicorn", "-c", "gunicorn.conf.py", "web:create_app()"]
    assert (ROOT / "gunicorn.conf.py").is_file()
    assert any(port.endswith(":8080") for port in web["ports"])
    test = " ".join(web["healthcheck"]["test"])
    assert "/readyz" in test and "urllib" in test and "curl" not in test


def test_worker_scales(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert worker["command"][:4] == ["celery", "-A", "worker", "worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert "TOOLNEXUS_CONCURRENCY" in service_environment(worker)
    test = " ".join(worker["healthcheck"]["test"])
    assert "inspect ping" in test and "--destination worker@${HOSTNAME}" in test
    assert "--hostname=worker@%h" in worker["command"]
    # A warm shutdown may wait for the hard time limit.
    time_limit = float(service_environment(worker)["TOOLNEXUS_TIME_LIMIT"])
    grace = seconds(worker["stop_grace_period"])
    assert grace > Settings(time_limit=time_limit).hard_time_limit


def test_beat_has_a_writable_schedule_and_no_pid_file(services: dict[str, Any]) -> None:
    beat = services["beat"]
    assert beat["command"][:4] == ["celery", "-A", "worker", "beat"]
    assert "--pidfile=" in beat["command"]
    schedule = next(arg for arg in beat["command"] if arg.startswith("--schedule="))
    assert not schedule.removeprefix("--schedule=").startswith("/")  # inside working_dir
    assert beat["working_dir"] == "/var/lib/toolnexus"
    assert "/var/lib/toolnexus" in (ROOT / "Dockerfile").read_text()
    assert "deploy" not in beat  # exactly one; never scaled by the file


def test_flower_requires_a_login(services: dict[str, Any]) -> None:
    flower = services["flower"]
    assert flower["command"] == ["celery", "-A", "worker", "flower"]
    environment = service_environment(flower)
    assert environment["FLOWER_BASIC_AUTH"] == "admin:secret"
    assert environment["FLOWER_PORT"] == "5555"
    assert "/healthcheck" in " ".join(flower["healthcheck"]["test"])
    with pytest.raises(ValueError, match="FLOWER_BASIC_AUTH"):
        compose({})


def test_everything_waits_for_a_healthy_redis(services: dict[str, Any]) -> None:
    for name in ("web", "worker", "beat", "flower"):
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_defaults_use_redis_for_tasks_and_broker(services: dict[str, Any]) -> None:
    for name in ("web", "worker", "beat", "flower"):
        environment = service_environment(services[name])
        assert environment["TOOLNEXUS_STORE"] == "redis://redis:6379/1"
        assert environment["TOOLNEXUS_BROKER_URL"] == "redis://redis:6379/0"
        Settings.from_env(environment)  # every default is a valid setting


def test_the_store_switches_to_a_shared_directory() -> None:
    switched = compose({**ENV, "TOOLNEXUS_STORE": "file:/data/tasks"})["services"]
    for name in ("web", "worker", "beat"):
        assert service_environment(switched[name])["TOOLNEXUS_STORE"] == "file:/data/tasks"
        assert "tasks:/data/tasks" in switched[name]["volumes"]


def test_env_example_names_only_real_settings() -> None:
    names = set(Settings.variables()) | {"FLOWER_BASIC_AUTH", "TOOLNEXUS_WEB_PORT"}
    lines = (ROOT / ".env.example").read_text().splitlines()
    assigned = [line.split("=", 1) for line in lines if line and not line.startswith("#")]
    assert assigned, ".env.example sets nothing"
    for name, _ in assigned:
        assert name in names, name
    environment = dict(assigned)
    settings_part = {k: v for k, v in environment.items() if k.startswith("TOOLNEXUS_")}
    settings_part.pop("TOOLNEXUS_WEB_PORT")
    Settings.from_env(settings_part)
    # Every value it sets reaches the services through compose's interpolation.
    services = compose(environment)["services"]
    for name, value in settings_part.items():
        if name != "TOOLNEXUS_CONCURRENCY":
            assert service_environment(services["web"])[name] == value, name


def test_dockerfile_is_slim_non_root_and_layered() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.1\d-slim", dockerfile, re.MULTILINE)
    user = re.findall(r"^USER (\S+)", dockerfile, re.MULTILINE)
    assert user and user[-1] not in ("root", "0")
    # Dependencies are installed before the code is copied, so code changes keep that layer.
    assert dockerfile.index("pip install -r") < dockerfile.index("COPY shared")
    assert "[test]" not in dockerfile and "pytest" not in dockerfile
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", "tests", ".env"} <= set(ignored)


def test_interpolation_follows_compose_rules() -> None:
    assert interpolate("${A:-x}", {}) == "x"
    assert interpolate("${A:-x}", {"A": ""}) == "x"
    assert interpolate("${A-x}", {"A": ""}) == ""
    assert interpolate("$${HOSTNAME} ${A}", {"A": "1"}) == "${HOSTNAME} 1"


def _compose_cli() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_docker_compose_accepts_the_file(tmp_path: Path) -> None:
    cli = _compose_cli()
    if cli is None:
        message = "NO COMPOSE CLI: `docker compose config` check skipped (.ci/run installs one)"
        if ci():
            pytest.fail(message)
        pytest.skip(message)
    result = subprocess.run(
        [*cli, "-f", str(COMPOSE_FILE), "config", "--quiet"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "FLOWER_BASIC_AUTH": "a:b", "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
