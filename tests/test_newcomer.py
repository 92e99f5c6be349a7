"""The newcomer's first run, as the README tells it.

A fresh virtual environment with the package pip-installed into it, an agent
file in a folder of its own, and from that folder: `toolnexus-serve` for a
round trip, then `toolnexus-serve web`, `worker` and `beat` on a private
Redis running 20 tasks. No PYTHONPATH, no file of the repository: the
serving configuration is the packaged one, and the agent is found in the
current directory.

The package installs the way a newcomer's does, resolving its declared
dependencies: `pip wheel` builds a wheelhouse once per run (a wheel of a
copy of the checkout, not an editable install, and the wheels of what its
`dependencies` in pyproject.toml resolve to from the package index, pinned
by constraints.txt as CI and the image are), and the fresh environment, which
sees nothing of this one's site-packages, gets `pip install --no-index
--find-links <wheelhouse> toolnexus-serve`: exactly the declared dependencies,
nothing more. A module the code imports that pyproject.toml does not declare
is missing there, and the start-up fails on it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
AGENT = """\
def shout(text: str) -> str:
    return text.upper() + "!"
"""
_NOT_INSTALLED = (
    ".venv", ".git", "site", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis",
    "tests", "bench", "docs", "tasks",
)  # fmt: skip
# The first test's setup builds the wheelhouse (some 70 wheels, most from the
# package index) and installs it: half a minute on an idle machine.
pytestmark = pytest.mark.timeout(420)


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package's wheel and the wheels of its declared dependencies, built once."""
    root = tmp_path_factory.mktemp("wheelhouse")
    source = root / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_INSTALLED))
    wheels = root / "wheels"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet"),
            *("-c", str(ROOT / "constraints.txt"), "--wheel-dir", str(wheels), str(source)),
        ],
        env=newcomer_env(),
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    return wheels


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Path:
    """The bin folder of a fresh virtual environment holding the package."""
    venv = tmp_path_factory.mktemp("newcomer") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=60)
    done = subprocess.run(
        [
            *(str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-compile"),
            *("--no-index", "--find-links", str(wheelhouse), "toolnexus-serve"),
        ],
        env=newcomer_env(),
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stderr
    return venv / "bin"


def newcomer_env(**env: str) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLNEXUS_", "FLOWER_"))}
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "WEB_CONCURRENCY", "GUNICORN_CMD_ARGS"):
        kept.pop(name, None)
    return {**kept, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **env}


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "my-agent"
    folder.mkdir()
    (folder / "myagent.py").write_text(AGENT)
    return folder


class Started:
    """The newcomer's processes, stopped at the end with SIGTERM (then SIGKILL)."""

    def __init__(self, bin_dir: Path, cwd: Path, env: dict[str, str]) -> None:
        self.bin_dir, self.cwd, self.env = bin_dir, cwd, env
        self.processes: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}

    def start(self, name: str, *args: str) -> None:
        """`toolnexus-serve <args>`, logged to <name>.log."""
        log = self.cwd.parent / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(self.bin_dir / "toolnexus-serve"), *args],
                cwd=self.cwd,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.processes[name] = (process, log)

    def check_alive(self) -> None:
        for name, (process, log) in self.processes.items():
            assert process.poll() is None, f"{name} exited:\n{log.read_text(errors='replace')}"

    def log(self, name: str) -> str:
        return self.processes[name][1].read_text(errors="replace")

    def stop(self) -> None:
        for process, _ in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process, _ in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


@pytest.fixture
def started(installed: Path, agent_dir: Path) -> Iterator[Started]:
    fleet = Started(installed, agent_dir, newcomer_env())
    try:
        yield fleet
    finally:
        fleet.stop()


def send(url: str, text: str, **params: Any) -> dict[str, Any]:
    message = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": [{"text": text}]}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message, **params},
    }
    reply = requests.post(url, json=body, headers={"A2A-Version": "1.0"}, timeout=40)
    assert reply.status_code == 200, reply.text
    payload = reply.json()
    assert "result" in payload, payload
    return dict(payload["result"]["task"])


def get(url: str, task_id: str) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}}
    reply = requests.post(url, json=body, headers={"A2A-Version": "1.0"}, timeout=10)
    return dict(reply.json()["result"])


def answer(task: dict[str, Any]) -> str:
    return str(task["artifacts"][0]["parts"][0]["text"])


def ready(fleet: Started, url: str) -> bool:
    fleet.check_alive()
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.ConnectionError:
        return False


def test_the_installed_package_is_not_the_checkout(installed: Path, agent_dir: Path) -> None:
    # The package and its dependencies, all from the fresh environment.
    code = (
        "import worker, web, flask, celery\n"
        "for module in (worker, web, flask, celery): print(module.__file__)"
    )
    done = subprocess.run(
        [str(installed / "python"), "-c", code],
        cwd=agent_dir,
        env=newcomer_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    for path in done.stdout.split():
        assert Path(path).is_relative_to(installed.parent), path


def test_one_process_from_the_agents_folder(started: Started) -> None:
    port = free_port()
    started.start("embedded", "--run", "myagent:shout", "--port", str(port))
    url = f"http://127.0.0.1:{port}/"
    wait_for(lambda: ready(started, url + "healthz"), timeout=60, what="toolnexus-serve")

    task = send(url, "hello")

    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    assert answer(task) == "HELLO!"


def test_a_fleet_from_the_agents_folder_runs_20_tasks(started: Started, tmp_path: Path) -> None:
    redis = RedisServer().start()
    try:
        port = free_port()
        state = tmp_path / "state"
        started.env.update(
            TOOLNEXUS_STORE=f"{redis.url}/1",
            TOOLNEXUS_BROKER_URL=f"{redis.url}/0",
            TOOLNEXUS_RUN="myagent:shout",
            TOOLNEXUS_STATE_DIR=str(state),
            TOOLNEXUS_REAP_EVERY="1",
        )
        started.start("web", "web", "--port", str(port), "--workers", "1")
        started.start("worker", "worker", "--concurrency", "2")
        started.start("beat", "beat")
        url = f"http://127.0.0.1:{port}/"
        # Ready once the store, the broker and beat's reaper all answer.
        wait_for(lambda: ready(started, url + "readyz"), timeout=90, what="the fleet")

        at_once = {"returnImmediately": True}
        sent = [send(url, f"task {n}", configuration=at_once) for n in range(20)]

        def finished() -> list[dict[str, Any]] | None:
            started.check_alive()
            tasks = [get(url, task["id"]) for task in sent]
            done = all(task["status"]["state"] == "TASK_STATE_COMPLETED" for task in tasks)
            return tasks if done else None

        tasks = wait_for(finished, timeout=90, interval=0.2, what="20 tasks completed")
        assert [answer(task) for task in tasks] == [f"TASK {n}!" for n in range(20)]
    finally:
        started.stop()
        redis.close()
    # Beat kept its schedule in the state directory, not in the agent's folder.
    assert list(state.glob("celerybeat-schedule*")), list(state.iterdir())
    assert not list(started.cwd.glob("celerybeat-schedule*"))
    assert "beat starting:" in started.log("beat")
