"""compose.yaml, the Dockerfile, .env.example and constraints.txt, checked
without a Docker engine.

The structure is checked here, and `compose config` (the real client) shows
what compose would deploy; tests/test_compose_run.py runs each service's
command as a local process to show the commands work, and
tests/test_compose_docker.py (opt-in) runs the whole file on a real engine.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from shared import Settings
from tests.support.compose import (
    OVERRIDE_FILES,
    ROOT,
    cli_config,
    compose,
    compose_cli,
    container_environment,
    dotenv_values,
    interpolate,
    raw_compose,
    service_environment,
)
from tests.support.redis_server import ci

PASSWORD = "s3cret-redis"
DOTENV = {"FLOWER_BASIC_AUTH": "admin:secret", "REDIS_PASSWORD": PASSWORD}
APP_SERVICES = ("web", "worker", "beat", "flower")
# The only settings compose decides itself, whatever .env says: its Redis
# URLs carry the password (compose.file-store.yaml switches the store).
DECIDED_BY_COMPOSE = {"TOOLNEXUS_STORE", "TOOLNEXUS_BROKER_URL"}
COMPOSE_TEXT = (ROOT / "compose.yaml").read_text()


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    return dict(compose(DOTENV)["services"])


def environment_of(name: str, dotenv: dict[str, str] | None = None) -> dict[str, str]:
    """What service `name`'s container gets, with `dotenv` as the .env file."""
    dotenv = {**DOTENV, **(dotenv or {})}
    return container_environment(compose(dotenv)["services"][name], dotenv)


def seconds(duration: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(
        float(amount) * units[unit] for amount, unit in re.findall(r"([\d.]+)(ms|h|m|s)", duration)
    )


def needs_cli() -> list[str]:
    cli = compose_cli()
    if cli is None:
        message = "NO COMPOSE CLI: `compose config` checks skipped (.ci/run installs one)"
        if ci():
            pytest.fail(message)
        pytest.skip(message)
    return cli


def test_the_five_services(services: dict[str, Any]) -> None:
    # worker-io and grpc are opt-in (profiles "io" and "grpc"):
    # tests/test_worker_pools.py checks the first, the test below the second.
    # rabbitmq, postgres and db-upgrade too (profiles "rabbitmq", "postgres"),
    # used once their override files are added: the tests at the end.
    assert set(services) == {
        "redis",
        *APP_SERVICES,
        "worker-io",
        "grpc",
        "rabbitmq",
        "postgres",
        "db-upgrade",
    }


def test_the_grpc_service_is_opt_in_and_runs_the_grpc_role(services: dict[str, Any]) -> None:
    grpc, web = services["grpc"], services["web"]
    assert grpc["profiles"] == ["grpc"]  # `docker compose up` alone leaves it out
    assert grpc["command"][:2] == ["toolnexus-serve", "grpc"]
    assert grpc["env_file"] == web["env_file"]
    assert any(str(port).endswith(":50051") for port in grpc["ports"])


def test_compose_refuses_to_start_without_both_passwords() -> None:
    with pytest.raises(ValueError, match="FLOWER_BASIC_AUTH"):
        compose({"REDIS_PASSWORD": PASSWORD})
    with pytest.raises(ValueError, match="REDIS_PASSWORD"):
        compose({"FLOWER_BASIC_AUTH": "admin:secret"})
    # Set but empty is refused too: `cp .env.example .env` is not enough.
    with pytest.raises(ValueError, match=r"REDIS_PASSWORD|FLOWER_BASIC_AUTH"):
        compose({"FLOWER_BASIC_AUTH": "", "REDIS_PASSWORD": ""})


def test_env_example_ships_no_working_password() -> None:
    example = dotenv_values((ROOT / ".env.example").read_text())
    assert example["FLOWER_BASIC_AUTH"] == "" and example["REDIS_PASSWORD"] == ""
    with pytest.raises(ValueError, match=r"REDIS_PASSWORD|FLOWER_BASIC_AUTH"):
        compose(example)


def test_redis_needs_its_password_and_never_evicts(services: dict[str, Any]) -> None:
    redis = services["redis"]
    assert redis["image"].startswith("redis:")
    command = redis["command"]

    def flag(name: str) -> str:
        return str(command[command.index(name) + 1])

    assert flag("--appendonly") == "yes"
    assert flag("--requirepass") == PASSWORD
    assert flag("--maxmemory-policy") == "noeviction"
    assert flag("--maxmemory") == "0"  # no limit unless REDIS_MAXMEMORY says
    limited = compose({**DOTENV, "REDIS_MAXMEMORY": "2gb"})["services"]["redis"]["command"]
    assert limited[limited.index("--maxmemory") + 1] == "2gb"
    assert any(volume.endswith(":/data") for volume in redis["volumes"])
    assert "redis-data" in raw_compose()["volumes"]
    assert "ports" not in redis
    assert "env_file" not in redis  # the app's settings are none of its business
    # redis-cli exits 0 on an error reply, so the check looks for PONG, and
    # authenticates with REDISCLI_AUTH rather than a password on its command line.
    assert service_environment(redis)["REDISCLI_AUTH"] == PASSWORD
    assert redis["healthcheck"]["test"] == ["CMD-SHELL", "redis-cli ping | grep -q PONG"]


def test_store_and_broker_urls_carry_the_redis_password() -> None:
    for name in APP_SERVICES:
        environment = environment_of(name)
        for variable, database in (("TOOLNEXUS_STORE", "1"), ("TOOLNEXUS_BROKER_URL", "0")):
            url = urlsplit(environment[variable])
            assert (url.scheme, url.hostname, url.port) == ("redis", "redis", 6379), name
            assert url.password == PASSWORD and url.path == f"/{database}", (name, variable)
        Settings.from_env(environment)  # every value a service gets is a valid setting


def test_every_setting_in_dotenv_reaches_every_service() -> None:
    marked = {name: f"value-of-{name}" for name in Settings.variables()}
    for name in APP_SERVICES:
        environment = environment_of(name, marked)
        lost = {variable for variable, value in marked.items() if environment[variable] != value}
        assert lost == DECIDED_BY_COMPOSE, name


def test_compose_sets_only_what_it_must(services: dict[str, Any]) -> None:
    """Everything else is Settings' default or .env's: nothing listed twice."""
    decided = {
        "web": {"GUNICORN_CMD_ARGS"},
        "worker": {"TOOLNEXUS_CONCURRENCY"},
        "beat": set(),
        "flower": {"FLOWER_PORT", "FLOWER_BASIC_AUTH", "FLOWER_PURGE_OFFLINE_WORKERS"},
    }
    for name in APP_SERVICES:
        assert services[name]["env_file"] == ".env"
        own = set(service_environment(services[name]))
        assert own == DECIDED_BY_COMPOSE | {"TOOLNEXUS_TASK_TTL"} | decided[name], name


def test_a_finite_task_ttl_unless_dotenv_says_otherwise() -> None:
    for name in APP_SERVICES:
        assert Settings.from_env(environment_of(name)).task_ttl == 7 * 24 * 3600
    assert Settings.from_env(environment_of("web", {"TOOLNEXUS_TASK_TTL": "3600"})).task_ttl == 3600
    # Set but empty: the operator asked to keep every task.
    assert Settings.from_env(environment_of("web", {"TOOLNEXUS_TASK_TTL": ""})).task_ttl is None


def test_the_example_skill_only_when_asked_for() -> None:
    example = dotenv_values((ROOT / ".env.example").read_text())
    for dotenv in ({}, example | DOTENV):
        environment = environment_of("web", dotenv)
        assert "TOOLNEXUS_SKILLS" not in environment
        assert Settings.from_env(environment).skills is None
    asked = environment_of("web", {"TOOLNEXUS_SKILLS": "/app/examples/skills"})
    assert asked["TOOLNEXUS_SKILLS"] == "/app/examples/skills"


def test_ports_are_published_on_loopback_unless_configured(services: dict[str, Any]) -> None:
    published = {name: service["ports"] for name, service in services.items() if "ports" in service}
    assert published == {
        "web": ["127.0.0.1:8080:8080"],
        "grpc": ["127.0.0.1:50051:50051"],
        "flower": ["127.0.0.1:5555:5555"],
        "rabbitmq": ["127.0.0.1:15672:15672"],  # the management UI, with the rabbitmq profile
    }
    opened = compose({**DOTENV, "TOOLNEXUS_BIND_ADDRESS": "0.0.0.0", "TOOLNEXUS_WEB_PORT": "80"})
    assert opened["services"]["web"]["ports"] == ["0.0.0.0:80:8080"]
    assert opened["services"]["grpc"]["ports"] == ["0.0.0.0:50051:50051"]
    assert opened["services"]["flower"]["ports"] == ["127.0.0.1:5555:5555"]  # its own choice
    assert opened["services"]["rabbitmq"]["ports"] == ["127.0.0.1:15672:15672"]  # and its own
    flower = compose({**DOTENV, "FLOWER_BIND_ADDRESS": "10.0.0.5"})["services"]["flower"]
    assert flower["ports"] == ["10.0.0.5:5555:5555"]


def test_stop_grace_periods_cover_each_graceful_shutdown(
    services: dict[str, Any], tmp_path: Path
) -> None:
    # web: gunicorn's own graceful timeout, read from web.http.gunicorn_conf itself.
    code = "from web.http import gunicorn_conf; print(gunicorn_conf.graceful_timeout)"
    env = {**environment_of("web"), "TOOLNEXUS_STORE": f"file:{tmp_path}", "PATH": "/usr/bin"}
    probe = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert probe.returncode == 0, probe.stderr
    graceful_timeout = float(probe.stdout.strip())
    assert graceful_timeout == Settings().blocking_timeout + 5
    assert graceful_timeout < seconds(services["web"]["stop_grace_period"])
    # worker: a warm shutdown waits for running tasks, at most the hard time limit.
    worker_settings = Settings.from_env(environment_of("worker"))
    assert worker_settings.hard_time_limit < seconds(services["worker"]["stop_grace_period"])
    # beat and flower have nothing to wait for.
    for name in ("beat", "flower"):
        assert 0 < seconds(services[name]["stop_grace_period"]) <= 10, name
    assert seconds(services["redis"]["stop_grace_period"]) >= 10  # it writes its data out
    # Raised together with the settings they follow.
    raised = compose(
        {**DOTENV, "TOOLNEXUS_WEB_STOP_GRACE": "2m", "TOOLNEXUS_WORKER_STOP_GRACE": "1h"}
    )
    assert raised["services"]["web"]["stop_grace_period"] == "2m"
    assert raised["services"]["worker"]["stop_grace_period"] == "1h"


def test_web_serves_with_gunicorn_and_checks_readiness(services: dict[str, Any]) -> None:
    web = services["web"]
    assert web["command"] == ["toolnexus-serve", "web"]
    assert environment_of("web")["GUNICORN_CMD_ARGS"] == "--bind=0.0.0.0:8080"
    test = " ".join(web["healthcheck"]["test"])
    assert "/readyz" in test and "urllib" in test and "curl" not in test


def test_worker_scales(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert worker["command"][:2] == ["toolnexus-serve", "worker"]
    assert "container_name" not in worker and "ports" not in worker
    assert environment_of("worker")["TOOLNEXUS_CONCURRENCY"] == "2"
    assert environment_of("worker", {"TOOLNEXUS_CONCURRENCY": "8"})["TOOLNEXUS_CONCURRENCY"] == "8"
    test = " ".join(worker["healthcheck"]["test"])
    assert "inspect ping" in test and "--destination worker@${HOSTNAME}" in test
    assert "--hostname=worker@%h" in worker["command"]


def test_beat_has_a_writable_schedule_no_pid_file_and_a_health_check(
    services: dict[str, Any],
) -> None:
    beat = services["beat"]
    assert beat["command"] == ["toolnexus-serve", "beat"]  # no pid file: worker.cli.main
    # The schedule goes to the state directory, which the image makes writable.
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "TOOLNEXUS_STATE_DIR=/var/lib/toolnexus" in dockerfile
    assert "chown toolnexus:toolnexus /data/tasks /var/lib/toolnexus" in dockerfile
    assert "deploy" not in beat  # exactly one; never scaled by the file
    assert beat["healthcheck"]["test"] == ["CMD", "python", "-m", "worker.runtime.health", "beat"]


def test_flower_requires_a_login_on_every_page(services: dict[str, Any]) -> None:
    flower = services["flower"]
    assert flower["command"] == ["toolnexus-serve", "flower"]
    environment = environment_of("flower")
    assert environment["FLOWER_BASIC_AUTH"] == "admin:secret"
    assert environment["FLOWER_PORT"] == "5555"
    assert flower["healthcheck"]["test"] == [
        "CMD",
        "python",
        "-m",
        "worker.runtime.health",
        "flower",
    ]


def test_everything_waits_for_a_healthy_redis(services: dict[str, Any]) -> None:
    for name in APP_SERVICES:
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"


def test_env_example_names_only_real_settings() -> None:
    compose_only = {
        "FLOWER_BASIC_AUTH",
        "FLOWER_BIND_ADDRESS",
        "FLOWER_HOST_PORT",
        "REDIS_PASSWORD",
        "REDIS_MAXMEMORY",
        "TOOLNEXUS_BIND_ADDRESS",
        "TOOLNEXUS_WEB_PORT",
        "TOOLNEXUS_GRPC_HOST_PORT",
        "TOOLNEXUS_WEB_STOP_GRACE",
        "TOOLNEXUS_WORKER_STOP_GRACE",
        "COMPOSE_FILE",
        "COMPOSE_PROFILES",
        "RABBITMQ_USER",
        "RABBITMQ_PASSWORD",
        "RABBITMQ_UI_BIND_ADDRESS",
        "RABBITMQ_UI_PORT",
    }
    text = (ROOT / ".env.example").read_text()
    # Commented examples too: a typo there is copied into someone's .env.
    named = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=", text, re.MULTILINE))
    assert named - set(Settings.variables()) - compose_only == set()
    # `$${X}` is an escaped dollar, not a variable.
    files = COMPOSE_TEXT + "".join((ROOT / name).read_text() for name in OVERRIDE_FILES.values())
    read_by_compose = set(re.findall(r"(?<!\$)\$\{([A-Z][A-Z0-9_]*)", files))
    assert read_by_compose <= named, "every variable the compose files read is in .env.example"
    # COMPOSE_FILE and COMPOSE_PROFILES are read by compose itself.
    assert compose_only - {"COMPOSE_FILE", "COMPOSE_PROFILES"} <= read_by_compose
    example = dotenv_values(text)
    assert not any(value.startswith(("'", '"')) or " #" in value for value in example.values())
    settings_part = {k: v for k, v in example.items() if k in Settings.variables()}
    Settings.from_env(settings_part)


def test_dockerfile_is_slim_non_root_layered_and_pinned() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.1\d-slim", dockerfile, re.MULTILINE)
    user = re.findall(r"^USER (\S+)", dockerfile, re.MULTILINE)
    assert user and user[-1] not in ("root", "0")
    # Dependencies are installed before the code is copied, so code changes keep that layer,
    # at the exact versions of constraints.txt.
    install = re.search(r"pip install -r \S+ -c constraints\.txt", dockerfile)
    assert install and install.start() < dockerfile.index("COPY shared")
    assert re.search(r"^COPY pyproject\.toml constraints\.txt", dockerfile, re.MULTILINE)
    assert "[test]" not in dockerfile and "pytest" not in dockerfile
    # Every package the wheel is built from is in the image.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        assert f"COPY {package} ./{package}" in dockerfile, package
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", "tests", ".env"} <= set(ignored)
    assert "constraints.txt" not in ignored


def _pins() -> dict[str, str]:
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pairs = (line.split("==") for line in lines if line and not line.startswith("#"))
    return {canonicalize_name(name): version for name, version in pairs}


def _required(extras: set[str]) -> set[str]:
    """toolnexus-serve's dependencies with `extras`, transitively, as installed here."""
    found: set[str] = set()
    pending = [(canonicalize_name("toolnexus-serve"), frozenset(extras))]
    while pending:
        name, wanted = pending.pop()
        for text in metadata.requires(name) or []:
            requirement = Requirement(text)
            marker = requirement.marker
            if marker and not any(marker.evaluate({"extra": extra}) for extra in {"", *wanted}):
                continue
            dependency = canonicalize_name(requirement.name)
            if dependency not in found:
                found.add(dependency)
                pending.append((dependency, frozenset(requirement.extras)))
    return found


def test_constraints_pin_every_dependency_of_the_image_and_ci() -> None:
    """A dependency added to pyproject.toml without `tools/update-constraints`
    would be installed unpinned; one pinned outside its range cannot install."""
    pins = _pins()
    missing = _required({"test", "docs"}) - set(pins)
    assert missing == set(), f"not in constraints.txt (run tools/update-constraints): {missing}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    declared = [*project["dependencies"], *extras["test"], *extras["docs"]]
    for text in declared:
        requirement = Requirement(text)
        pinned = pins[canonicalize_name(requirement.name)]
        assert requirement.specifier.contains(pinned, prereleases=True), (text, pinned)


def test_ci_and_the_image_install_the_same_pins() -> None:
    assert "-c constraints.txt" in (ROOT / ".ci" / "run").read_text()
    updater = ROOT / "tools" / "update-constraints"
    assert updater.is_file() and updater.stat().st_mode & 0o111


def test_interpolation_follows_compose_rules() -> None:
    assert interpolate("${A:-x}", {}) == "x"
    assert interpolate("${A:-x}", {"A": ""}) == "x"
    assert interpolate("${A-x}", {"A": ""}) == ""
    assert interpolate("${A-x}", {}) == "x"
    assert interpolate("$${HOSTNAME} ${A}", {"A": "1"}) == "${HOSTNAME} 1"


# --- the real compose client -------------------------------------------------


def test_compose_config_deploys_what_the_checks_above_expect(tmp_path: Path) -> None:
    cli = needs_cli()
    dotenv = {**DOTENV, "TOOLNEXUS_NAME": "from-dotenv", "TOOLNEXUS_QUEUE": "q1"}
    result = cli_config(cli, tmp_path, dotenv)
    assert result.returncode == 0, result.stderr
    deployed = yaml.safe_load(result.stdout)["services"]
    for name in APP_SERVICES:
        environment = {k: str(v) for k, v in deployed[name]["environment"].items()}
        # env_file resolved by the client itself: .env reaches the container.
        assert environment["TOOLNEXUS_NAME"] == "from-dotenv", name
        assert environment["TOOLNEXUS_QUEUE"] == "q1", name
        assert urlsplit(environment["TOOLNEXUS_STORE"]).password == PASSWORD
        assert environment["TOOLNEXUS_TASK_TTL"] == "604800"
        assert "TOOLNEXUS_SKILLS" not in environment
    published = [port for service in deployed.values() for port in service.get("ports", [])]
    assert published, "web and flower publish a port"
    for port in published:
        host_ip = port["host_ip"] if isinstance(port, dict) else port.split(":")[0]
        assert host_ip == "127.0.0.1", port


@pytest.mark.parametrize(
    "dotenv",
    [{}, {"FLOWER_BASIC_AUTH": "a:b"}, {"REDIS_PASSWORD": "x"}, "the .env.example as shipped"],
)
def test_compose_config_refuses_without_passwords(tmp_path: Path, dotenv: Any) -> None:
    cli = needs_cli()
    if isinstance(dotenv, str):
        dotenv = dotenv_values((ROOT / ".env.example").read_text())
    result = cli_config(cli, tmp_path, dotenv)
    assert result.returncode != 0
    assert "REDIS_PASSWORD" in result.stderr or "FLOWER_BASIC_AUTH" in result.stderr


def test_the_file_store_override(tmp_path: Path) -> None:
    cli = needs_cli()
    result = cli_config(cli, tmp_path, DOTENV, "compose.file-store.yaml")
    assert result.returncode == 0, result.stderr
    deployed = yaml.safe_load(result.stdout)["services"]
    for name in APP_SERVICES:
        environment = deployed[name]["environment"]
        assert environment["TOOLNEXUS_STORE"] == "file:/data/tasks", name
        assert urlsplit(environment["TOOLNEXUS_BROKER_URL"]).password == PASSWORD
        volumes = [
            str(v) if isinstance(v, str) else f"{v['source']}:{v['target']}"
            for v in deployed[name]["volumes"]
        ]
        assert any(volume.startswith("tasks:/data/tasks") for volume in volumes), name


# --- RabbitMQ and PostgreSQL: profiles in compose.yaml, wiring in override files ---
AMQP_DOTENV = {**DOTENV, "RABBITMQ_PASSWORD": "s3cret-rabbit"}
ALL_APP_SERVICES = (*APP_SERVICES, "grpc", "worker-io")
POSTGRES_STORE = "postgresql://postgres@postgres:5432/toolnexus"


def test_rabbitmq_and_postgres_are_opt_in_profiles(services: dict[str, Any]) -> None:
    rabbitmq, postgres, upgrade = (services[n] for n in ("rabbitmq", "postgres", "db-upgrade"))
    assert rabbitmq["profiles"] == ["rabbitmq"]
    assert rabbitmq["image"] == "rabbitmq:3-management"
    assert rabbitmq["hostname"] == "rabbitmq"  # the node's data is named after it
    assert rabbitmq["ports"] == ["127.0.0.1:15672:15672"]  # the management UI, loopback only
    assert "rabbitmq-data:/var/lib/rabbitmq" in rabbitmq["volumes"]
    assert postgres["profiles"] == upgrade["profiles"] == ["postgres"]
    assert "ports" not in postgres  # it trusts its clients: only compose's network reaches it
    assert "postgres-data:/var/lib/postgresql/data" in postgres["volumes"]
    assert upgrade["command"] == ["toolnexus-serve", "db", "upgrade"]
    assert upgrade["restart"] == "no"  # a one-shot
    assert upgrade["environment"]["TOOLNEXUS_STORE"] == POSTGRES_STORE
    assert upgrade["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("rabbitmq", "postgres"):
        assert services[name]["healthcheck"]["test"][0] == "CMD"


def test_the_rabbitmq_override_points_every_service_at_it() -> None:
    deployed = compose(AMQP_DOTENV, "compose.rabbitmq.yaml")["services"]
    assert deployed["rabbitmq"]["environment"]["RABBITMQ_DEFAULT_PASS"] == "s3cret-rabbit"
    for name in ALL_APP_SERVICES:
        environment = container_environment(deployed[name], AMQP_DOTENV)
        broker = environment["TOOLNEXUS_BROKER_URL"]
        assert broker == "amqp://toolnexus:s3cret-rabbit@rabbitmq:5672/", name
        assert Settings.from_env({"TOOLNEXUS_BROKER_URL": broker}).broker_url == broker
        # Redis stays the store, and every service waits for both.
        assert urlsplit(environment["TOOLNEXUS_STORE"]).hostname == "redis", name
        assert deployed[name]["depends_on"]["rabbitmq"]["condition"] == "service_healthy"
        assert deployed[name]["depends_on"]["redis"]["condition"] == "service_healthy"
        assert deployed[name]["command"] == compose(DOTENV)["services"][name]["command"]


def test_the_rabbitmq_override_wants_its_password() -> None:
    with pytest.raises(ValueError, match="RABBITMQ_PASSWORD"):
        compose(DOTENV, "compose.rabbitmq.yaml")
    compose(DOTENV)  # compose.yaml alone does not


def test_the_postgres_override_waits_for_the_schema() -> None:
    deployed = compose(AMQP_DOTENV, "compose.postgres.yaml", "compose.rabbitmq.yaml")["services"]
    for name in ALL_APP_SERVICES:
        environment = container_environment(deployed[name], AMQP_DOTENV)
        assert environment["TOOLNEXUS_STORE"] == POSTGRES_STORE, name
        assert environment["TOOLNEXUS_BROKER_URL"].startswith("amqp://"), name
        upgrade = deployed[name]["depends_on"]["db-upgrade"]
        assert upgrade["condition"] == "service_completed_successfully", name
    postgres_only = compose(DOTENV, "compose.postgres.yaml")["services"]["worker"]
    assert urlsplit(postgres_only["environment"]["TOOLNEXUS_BROKER_URL"]).hostname == "redis"


def test_compose_config_with_both_profiles(tmp_path: Path) -> None:
    cli = needs_cli()
    files = ("compose.rabbitmq.yaml", "compose.postgres.yaml")
    # The profiles as an operator names them in .env (compose reads it there).
    dotenv = {**AMQP_DOTENV, "COMPOSE_PROFILES": "rabbitmq,postgres"}
    result = cli_config(cli, tmp_path, dotenv, *files)
    assert result.returncode == 0, result.stderr
    deployed = yaml.safe_load(result.stdout)["services"]
    assert {"rabbitmq", "postgres", "db-upgrade"} <= set(deployed)
    for name in APP_SERVICES:
        environment = deployed[name]["environment"]
        assert environment["TOOLNEXUS_STORE"] == POSTGRES_STORE, name
        assert urlsplit(environment["TOOLNEXUS_BROKER_URL"]).hostname == "rabbitmq", name


def test_the_sentinel_override_points_every_service_at_the_sentinels(tmp_path: Path) -> None:
    deployed = compose(DOTENV, "compose.sentinel.yaml")["services"]
    for name in ALL_APP_SERVICES:
        environment = container_environment(deployed[name], DOTENV)
        for variable, db in (("TOOLNEXUS_STORE", 1), ("TOOLNEXUS_BROKER_URL", 0)):
            url = environment[variable]
            assert url == (
                f"redis+sentinel://:{PASSWORD}@sentinel-1:26379,sentinel-2:26379,"
                f"sentinel-3:26379/toolnexus/{db}"
            ), name
        settings = Settings.from_env(environment)
        assert settings.redis_min_replicas == 1, name
        for sentinel in ("sentinel-1", "sentinel-2", "sentinel-3"):
            assert deployed[name]["depends_on"][sentinel]["condition"] == "service_healthy"
    # The Sentinels watch compose's Redis, by name, with its password, and
    # agree by two of three; the replica follows it, and both log in to
    # whichever is master later.
    for sentinel in ("sentinel-1", "sentinel-2", "sentinel-3"):
        script = deployed[sentinel]["command"][-1]
        assert "sentinel monitor toolnexus redis 6379 2" in script
        assert "sentinel auth-pass toolnexus $REDIS_PASSWORD" in script
        assert "sentinel announce-hostnames yes" in script
        assert deployed[sentinel]["environment"]["REDIS_PASSWORD"] == PASSWORD
    replica = deployed["redis-replica"]["command"]
    assert replica[-3:] == ["--replicaof", "redis", "6379"]
    for node, name in ((deployed["redis"]["command"], "redis"), (replica, "redis-replica")):
        assert node[node.index("--masterauth") + 1] == PASSWORD
        assert node[node.index("--replica-announce-ip") + 1] == name
    cli = needs_cli()
    result = cli_config(
        cli, tmp_path, {**DOTENV, "COMPOSE_PROFILES": "sentinel"}, "compose.sentinel.yaml"
    )
    assert result.returncode == 0, result.stderr
    assert {"redis-replica", "sentinel-1", "sentinel-2", "sentinel-3"} <= set(
        yaml.safe_load(result.stdout)["services"]
    )
