"""A compose project on a real Docker engine, made from a copy of this
checkout and an .env as an operator writes it, torn down with its volumes.

For the opt-in Docker tests (marker `docker`): without `-m docker` they are
skipped with the reason given, which names the last recorded run."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.compose import ROOT, compose_cli
from tests.support.redis_server import ci, free_port

# What the image is built from: the working tree, minus what is never shipped.
NOT_CONTEXT = (".git", ".venv", ".env", "__pycache__", ".*_cache", ".hypothesis", "*.egg-info")


@dataclass
class Project:
    """One compose project made from a copy of this checkout and its own .env."""

    cli: list[str]
    folder: Path
    name: str
    web_port: int
    flower_port: int
    login: tuple[str, str]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def flower_url(self) -> str:
        return f"http://127.0.0.1:{self.flower_port}"

    @contextmanager
    def timed(self, step: str) -> Iterator[None]:
        started = time.monotonic()
        yield
        self.timings[step] = time.monotonic() - started

    def compose(self, *args: str, timeout: float = 600) -> str:
        result = subprocess.run(
            [*self.cli, "-p", self.name, *args],
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=timeout,
            # Only the .env feeds compose's interpolation, not this shell.
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.folder)},
        )
        assert result.returncode == 0, f"compose {' '.join(args)}:\n{result.stderr[-4000:]}"
        return result.stdout

    def containers(self, service: str) -> list[str]:
        return self.compose("ps", "-q", service).split()

    def health(self, container: str) -> str:
        state = json.loads(docker("inspect", "--format", "{{json .State}}", container))
        return str(state["Health"]["Status"]) if state.get("Health") else state["Status"]

    def flower(self, path: str) -> Any:
        reply = requests.get(f"{self.flower_url}{path}", auth=self.login, timeout=10)
        reply.raise_for_status()
        return reply.json()


def docker(*args: str) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"docker {' '.join(args)}:\n{result.stderr}"
    return result.stdout


@contextmanager
def compose_project(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    settings: Mapping[str, str],
    opt_in: str,
    files: tuple[str, ...] = (),
) -> Iterator[Project]:
    """A project with `settings` in its .env (and the passwords and ports it
    needs), on compose.yaml and `files`; skipped with `opt_in` unless the run
    selected the `docker` marker."""
    if "docker" not in (request.config.getoption("markexpr") or ""):
        pytest.skip(opt_in if not ci() else f"CI=true: {opt_in}")
    cli = compose_cli()
    engine = subprocess.run(["docker", "info"], capture_output=True) if cli else None
    if cli is None or engine is None or engine.returncode != 0:
        pytest.fail("no Docker engine or compose client: run tools/docker-engine.sh")
    folder = tmp_path_factory.mktemp("docker") / "toolnexus"
    shutil.copytree(ROOT, folder, ignore=shutil.ignore_patterns(*NOT_CONTEXT))
    login = ("admin", secrets.token_hex(8))
    selected = [part for name in ("compose.yaml", *files) for part in ("-f", name)]
    made = Project(
        [*cli, *selected],
        folder,
        f"toolnexus-test-{secrets.token_hex(4)}",
        free_port(),
        free_port(),
        login,
    )
    dotenv = {
        "FLOWER_BASIC_AUTH": ":".join(login),
        "REDIS_PASSWORD": secrets.token_hex(16),
        **settings,
        "TOOLNEXUS_WEB_PORT": str(made.web_port),
        "FLOWER_HOST_PORT": str(made.flower_port),
    }
    (folder / ".env").write_text("".join(f"{k}={v}\n" for k, v in dotenv.items()))
    started = time.monotonic()
    try:
        yield made
    finally:
        try:
            with made.timed("down -v"):
                made.compose("down", "-v", "--remove-orphans", timeout=300)
        finally:
            made.timings["whole run"] = time.monotonic() - started
            shown = ", ".join(f"{step}: {spent:.0f} s" for step, spent in made.timings.items())
            print(f"\ndocker compose test timings: {shown}")
