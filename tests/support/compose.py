"""Read compose.yaml the way `docker compose` would, and run its services as
local processes, so the tests exercise the very commands the file deploys."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from shared.store.contract import Store
from shared.store.resolve import resolve_store
from tests.support.fault_proxy import FaultProxy, proxied, proxy_for
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent.parent
COMPOSE_FILE = ROOT / "compose.yaml"

_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:-default}`, `${VAR:?error}` and `$$`."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, operator, argument = match.group(1), match.group(2), match.group(3)
        value = env.get(name)
        if operator in (":-", "-"):
            missing = value is None or (operator == ":-" and value == "")
            return argument if missing else str(value)
        if operator in (":?", "?"):
            if value is None or (operator == ":?" and value == ""):
                raise ValueError(f"{name}: {argument}")
            return value
        return value or ""

    return _VARIABLE.sub(replace, text)


def _interpolated(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_interpolated(item, env) for item in node]
    if isinstance(node, dict):
        return {key: _interpolated(value, env) for key, value in node.items()}
    return node


def raw_compose(*extra_files: str) -> dict[str, Any]:
    """compose.yaml, with each of `extra_files` (compose.rabbitmq.yaml, say)
    laid over it as `docker compose -f ... -f ...` does: mappings merged key
    by key, anything else replaced."""
    loaded = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(loaded, dict)
    for name in extra_files:
        override = yaml.safe_load((ROOT / name).read_text())
        assert isinstance(override, dict), name
        loaded = _merged(loaded, override)
    return loaded


def _merged(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        keys = [*base, *(key for key in override if key not in base)]
        return {
            key: _merged(base[key], override[key]) if key in base and key in override
            else override.get(key, base.get(key))
            for key in keys
        }  # fmt: skip
    return override


def compose(env: Mapping[str, str], *extra_files: str) -> dict[str, Any]:
    """compose.yaml (and `extra_files` over it) with every variable substituted from `env`."""
    return dict(_interpolated(raw_compose(*extra_files), env))


def service_environment(service: Mapping[str, Any]) -> dict[str, str]:
    """The service's own `environment` block."""
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) for item in environment)
    return {key: "" if value is None else str(value) for key, value in environment.items()}


def container_environment(service: Mapping[str, Any], dotenv: Mapping[str, str]) -> dict[str, str]:
    """What the container gets: its `env_file` (compose.yaml's names only
    `.env`, whose contents are `dotenv`), then its `environment`, which wins."""
    env_files = service.get("env_file") or []
    env_files = [env_files] if isinstance(env_files, str) else env_files
    assert set(env_files) <= {".env"}, f"unexpected env_file {env_files}"
    return {**(dotenv if env_files else {}), **service_environment(service)}


# compose's Redis URLs, `redis://:<password>@redis:6379/<db>`.
_COMPOSE_REDIS = re.compile(r"redis://(?P<login>[^@/]*@)?redis:6379")
# compose.rabbitmq.yaml's broker URL and compose.postgres.yaml's store URL.
_COMPOSE_AMQP = re.compile(r"amqp://[^@/]*@rabbitmq:5672/\S*")
_COMPOSE_POSTGRES = re.compile(r"postgresql://[^@/]*@postgres:5432/\S*")
# Which override file brings each broker or store other than compose's Redis.
OVERRIDE_FILES = {"amqp": "compose.rabbitmq.yaml", "postgresql": "compose.postgres.yaml"}


def localised(environment: Mapping[str, str], redis_url: str) -> dict[str, str]:
    """The service's environment as it would be inside the image, on this host:
    the `redis` host is a local server and the image's /app is this checkout.
    The URL keeps compose's own password when the local server has one (which
    must then be the same); a server without one refuses any password."""
    local = urlsplit(redis_url)

    def to_local(match: re.Match[str]) -> str:
        login = (match["login"] or "") if local.password else ""
        return f"redis://{login}{local.hostname}:{local.port}"

    return {
        key: _COMPOSE_REDIS.sub(to_local, value).replace("/app/", f"{ROOT}/")
        for key, value in environment.items()
    }


class ServiceProcess:
    """One compose service's command running as a local process group."""

    def __init__(
        self, name: str, command: list[str], env: Mapping[str, str], cwd: Path, log: Path
    ) -> None:
        self.name = name
        self.log = log
        self._log_file = log.open("wb")
        self.process = subprocess.Popen(
            command,
            env={**os.environ, **env},
            cwd=cwd,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        if self.alive():
            os.killpg(self.process.pid, sig)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (a warm shutdown for Celery), then SIGKILL if it lingers."""
        if self.alive():
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(5)
        self._log_file.close()
        return self.process.returncode


def dotenv_for(overrides: Mapping[str, str] | None, redis_password: str | None) -> dict[str, str]:
    """A `.env` as an operator would write it: the passwords compose
    demands, then `overrides`."""
    return {
        "FLOWER_BASIC_AUTH": "admin:secret",
        # Compose refuses an empty one; a local server without a password
        # never sees it (see `localised`).
        "REDIS_PASSWORD": redis_password or "unused-locally",
        # compose.rabbitmq.yaml's; the test's broker URL replaces its URL whole.
        "RABBITMQ_PASSWORD": "unused-locally",
        **(overrides or {}),
    }


@dataclass(frozen=True)
class Backends:
    """Where a stack's broker and store are, when not compose's Redis: the
    URLs a test matrix gave (tests/support/matrix.py). Each replaces what
    its override file (compose.rabbitmq.yaml, compose.postgres.yaml) points
    the services at, so the stack runs those files too."""

    broker_kind: str = "redis"
    broker_url: str | None = None
    store_kind: str = "redis"
    store_url: str | None = None

    def files(self) -> tuple[str, ...]:
        kinds = (self.broker_kind, self.store_kind)
        return tuple(OVERRIDE_FILES[kind] for kind in kinds if kind in OVERRIDE_FILES)

    def localise(self, environment: dict[str, str]) -> dict[str, str]:
        """compose's rabbitmq and postgres hosts swapped for the given URLs."""
        swaps = ((_COMPOSE_AMQP, self.broker_url), (_COMPOSE_POSTGRES, self.store_url))
        for key, value in environment.items():
            for pattern, url in swaps:
                if url is not None:
                    value = pattern.sub(url, value)
            environment[key] = value
        return environment


class LocalStack:
    """compose.yaml's project services run here against a local Redis.

    `overrides` are the `.env` file: they feed compose's interpolation and
    reach the services through `env_file`, as in a container; web and flower
    get free ports. Services can be started, stopped and restarted one by
    one, which is what the reliability scenarios need. `backends` puts the
    broker or store elsewhere (RabbitMQ, PostgreSQL) through compose's own
    override files; the stack then takes queue names of its own, since the
    broker may be shared with other stacks of this test run.
    """

    def __init__(
        self,
        redis_url: str,
        folder: Path,
        overrides: Mapping[str, str] | None = None,
        backends: Backends | None = None,
    ) -> None:
        from tests.support.redis_server import free_port

        self.folder = folder
        self.backends = backends or Backends()
        self.dotenv = dotenv_for(overrides, urlsplit(redis_url).password)
        if self.backends.broker_kind != "redis":
            suffix = secrets.token_hex(4)
            self.dotenv.setdefault("TOOLNEXUS_QUEUE", f"toolnexus-{suffix}")
            self.dotenv.setdefault("TOOLNEXUS_PUSH_QUEUE", f"push-{suffix}")
        self.services: dict[str, Any] = compose(self.dotenv, *self.backends.files())["services"]
        self.web_port, self.flower_port = free_port(), free_port()
        extra = {
            "web": {"GUNICORN_CMD_ARGS": f"--bind=127.0.0.1:{self.web_port}"},
            "flower": {"FLOWER_PORT": str(self.flower_port), "FLOWER_ADDRESS": "127.0.0.1"},
        }
        # `python` in a command is this interpreter, as in the image it is the image's.
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        self.environments = {
            name: {
                **self.backends.localise(
                    localised(container_environment(self.services[name], self.dotenv), redis_url)
                ),
                **extra.get(name, {}),
                "PATH": path,
            }
            for name in ("web", "worker", "beat", "flower")
        }
        for name, environment in self.environments.items():
            # The override file must have pointed every service at the broker
            # and store given (what compose.rabbitmq.yaml / compose.postgres.yaml promise).
            for url, variable in (
                (self.backends.broker_url, "TOOLNEXUS_BROKER_URL"),
                (self.backends.store_url, "TOOLNEXUS_STORE"),
            ):
                assert url is None or environment[variable] == url, (name, variable)
        # The image's WORKDIR is the project; beat's state directory (the
        # image's /var/lib/toolnexus) is a folder of this run's own.
        self.beat_dir = folder / "beat"
        self.beat_dir.mkdir(exist_ok=True)
        self.environments["beat"]["TOOLNEXUS_STATE_DIR"] = str(self.beat_dir)
        self.processes: dict[str, ServiceProcess] = {}
        self._starts: dict[str, int] = {}
        self._stores: list[Store] = []

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def flower_url(self) -> str:
        return f"http://127.0.0.1:{self.flower_port}"

    @property
    def store_url(self) -> str:
        return self.environments["web"]["TOOLNEXUS_STORE"]

    def open_store(self, url: str | None = None) -> Store:
        """The stack's store (or the one at `url`: the same store, reached
        past a proxy the test cuts) through the store contract, whatever its
        kind, as the services open it; closed with the stack."""
        store: Store = resolve_store(url or self.store_url)
        self._stores.append(store)
        return store

    def start(
        self, name: str, *, as_name: str | None = None, args: Sequence[str] = (), **env: str
    ) -> ServiceProcess:
        """Start `name`'s command; `as_name` runs a second copy (another worker),
        and `args` go after the command (a later flag wins over the file's)."""
        label = as_name or name
        count = self._starts[label] = self._starts.get(label, 0) + 1
        process = ServiceProcess(
            label,
            [*self.services[name]["command"], *args],
            {**self.environments[name], **env},
            self.beat_dir if name == "beat" else ROOT,
            self.folder / f"{label}.{count}.log",
        )
        self.processes[label] = process
        return process

    def stop(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is not None:
            process.stop()

    def log_tails(self, lines: int = 200) -> str:
        """The last `lines` of every process log this stack wrote (each start's,
        the stopped and killed ones' too), for a failed test's report."""
        parts = []
        for path in sorted(self.folder.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name} (last {len(tail)} lines) ---\n" + "\n".join(tail))
        return "\n".join(parts)

    def close(self) -> None:
        for name in list(self.processes):
            self.stop(name)
        for store in self._stores:
            store.close()


def start_grpc(stack: LocalStack, port: int, name: str = "grpc", **env: str) -> ServiceProcess:
    """The gRPC process, with the web service's environment (as a `grpc`
    service in compose.yaml would have), stopped with the stack."""
    process = ServiceProcess(
        name,
        [sys.executable, "-m", "web.grpc_process"],
        {**stack.environments["web"], "TOOLNEXUS_GRPC_PORT": str(port), **env},
        ROOT,
        stack.folder / f"{name}.log",
    )
    stack.processes[name] = process
    return process


def compose_redis(dotenv: Mapping[str, str], *, appendonly: bool = False) -> RedisServer:
    """A private Redis (not started) run as compose.yaml runs its redis: its
    arguments (the memory policy, say) and the password `dotenv` gives it."""
    arguments = compose(dotenv)["services"]["redis"]["command"][1:]
    return RedisServer(appendonly=appendonly, password=dotenv["REDIS_PASSWORD"], args=arguments)


@contextmanager
def local_stack(
    folder: Path,
    overrides: Mapping[str, str] | None = None,
    *,
    appendonly: bool = False,
    backends: Backends | None = None,
) -> Iterator[tuple[RedisServer, LocalStack]]:
    """A private Redis run with compose.yaml's own redis arguments (its
    password and memory policy), and a LocalStack on it, both torn down
    afterwards."""
    dotenv = dotenv_for(overrides, secrets.token_hex(16))
    redis = compose_redis(dotenv, appendonly=appendonly).start()
    stack = LocalStack(redis.url, folder, dotenv, backends)
    try:
        yield redis, stack
    finally:
        stack.close()
        redis.close()


@contextmanager
def store_behind_proxy(backends: Backends) -> Iterator[tuple[Backends, FaultProxy]]:
    """`backends` with its store (a server of the machine's, PostgreSQL,
    which others use and a test must not stop) reached through a FaultProxy
    the test can make refuse: to the stack the store is then gone."""
    assert backends.store_url is not None, "compose's Redis is stopped, not proxied"
    with proxy_for(backends.store_url, 5432) as proxy:
        yield replace(backends, store_url=proxied(backends.store_url, proxy.port)), proxy


def dotenv_values(text: str) -> dict[str, str]:
    """The assignments of a `.env` file (compose reads values literally)."""
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {name.strip(): value for name, value in pairs if not name.lstrip().startswith("#")}


def compose_cli() -> list[str] | None:
    """`docker compose` (v2) or `docker-compose` (v1), whichever is here."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def cli_config(
    cli: Sequence[str], folder: Path, dotenv: Mapping[str, str], *extra_files: str
) -> subprocess.CompletedProcess[str]:
    """`compose config` run by the real client on copies of the compose files
    in `folder`, beside a `.env` holding `dotenv`: what compose would deploy."""
    files = ["compose.yaml", *extra_files]
    for name in files:
        shutil.copy(ROOT / name, folder / name)
    (folder / ".env").write_text("".join(f"{key}={value}\n" for key, value in dotenv.items()))
    selected = [part for name in files for part in ("-f", str(folder / name))]
    return subprocess.run(
        [*cli, *selected, "config"],
        capture_output=True,
        text=True,
        cwd=folder,
        # Nothing from this shell: only the .env may feed the interpolation.
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder)},
    )
