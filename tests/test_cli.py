"""`toolnexus-serve` and its roles, run as a user runs them: from a folder of
their own, with no TOOLNEXUS_* variable but the ones each case sets.

Every role answers --help without any settings; every bad setting is one
line naming it, and exit status 2, before a server or Celery starts.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from shared.addresses import own_names
from tests.support.polling import wait_for
from tests.support.redis_server import free_port
from worker.cli.main import ROLES
from worker.engine.results import UnsupportedResult, final_change


def toolnexus_serve() -> list[str]:
    script = shutil.which("toolnexus-serve")
    return [script] if script else [sys.executable, "-m", "worker.cli.main"]


def clean_env(**env: str) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("TOOLNEXUS_", "FLOWER_"))}
    kept.pop("PYTHONPATH", None)
    return {**kept, **env}


def run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*toolnexus_serve(), *args],
        cwd=cwd,
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("role", ["", *ROLES])
def test_help_of_every_role_exits_0_and_shows_its_options(role: str, tmp_path: Path) -> None:
    # A setting that would refuse to start proves --help reads none.
    done = run([role, "--help"] if role else ["--help"], tmp_path, TOOLNEXUS_STORE="bogus")

    assert done.returncode == 0, done.stderr
    expected = (
        [flag.name for flag in ROLES[role].flags]
        if role
        else ["--host", "--port", "--store", "--run", "--skills", "--grace", "--version"]
    )
    missing = [flag for flag in expected if flag not in done.stdout]
    assert missing == [], done.stdout
    assert f"toolnexus-serve {role}".strip() in done.stdout


@pytest.mark.parametrize(
    "module",
    [
        ["worker.runtime.health"],
        ["worker.runtime.flower_login"],
        ["celery", "-A", "worker", "worker"],
    ],
)
def test_the_helpers_help_needs_no_settings(module: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", *module, "--help"],
        cwd=tmp_path,
        env=clean_env(TOOLNEXUS_STORE="memory"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "usage" in done.stdout.lower()


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a folder")
    return path


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_every_bad_setting_is_one_line_and_exit_2(
    tmp_path: Path, a_file: Path, taken_port: int
) -> None:
    cases: list[tuple[list[str], dict[str, str], str]] = [
        (["--store", f"file:{a_file}/tasks"], {}, "is under"),
        (["--store", f"file:{a_file}"], {}, "is a regular file, not a directory"),
        (
            ["--store", "redis://localhost:99999/0"],
            {},
            "TOOLNEXUS_STORE='redis://localhost:99999/0'",
        ),
        (["--grace", "-1"], {}, "--grace"),
        (["--port", str(taken_port)], {}, "is in use (another toolnexus-serve?)"),
        (["--run", "nosuchmodule_x:run"], {}, "TOOLNEXUS_RUN"),
        (["web", "--port", str(taken_port), "--store", f"file:{tmp_path}/t"], {}, "is in use"),
        (["web", "--store", "memory"], {}, "TOOLNEXUS_STORE=memory is private"),
        (["web", "--port", "99999", "--store", f"file:{tmp_path}/t"], {}, "TOOLNEXUS_PORT"),
        (["worker", "--store", f"file:{a_file}"], {}, "is a regular file"),
        (["worker", "--store", f"file:{tmp_path}/t", "--broker", "redis://x:99999"], {}, "BROKER"),
        (["beat", "--store", f"file:{tmp_path}/t", "--run", "nosuchmodule_x:run"], {}, "RUN"),
        (["flower", "--store", "redis://localhost:99999/0"], {}, "TOOLNEXUS_STORE"),
        (["worker"], {"TOOLNEXUS_HEARTBEAT": "soon"}, "TOOLNEXUS_HEARTBEAT='soon'"),
    ]
    # Each is a process that imports the service; four at a time.
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda case: run(case[0], tmp_path, **case[1]), cases))
    for (args, _, said), done in zip(cases, results, strict=True):
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (args, done.stderr)
        assert len(lines) == 1, (args, lines)
        assert lines[0].startswith("toolnexus-serve"), (args, lines)
        assert said in lines[0], (args, lines)


@pytest.fixture
def shared_port() -> Iterator[int]:
    """A port held as grpcio's own servers hold theirs by default, with
    SO_REUSEPORT: what a gRPC server left running from an earlier start holds."""
    with socket.socket() as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.mark.parametrize("role", ["", "grpc"], ids=["embedded", "grpc"])
def test_a_grpc_port_held_by_another_server_is_refused_not_shared(
    role: str, tmp_path: Path, shared_port: int
) -> None:
    """Bound beside the holder, a second server would take some of its
    connections silently; it stops, saying why in one line."""
    grpc = {
        "TOOLNEXUS_GRPC_URL": f"127.0.0.1:{shared_port}",
        "TOOLNEXUS_GRPC_PORT": str(shared_port),
        "TOOLNEXUS_STORE": f"file:{tmp_path}/tasks",
    }
    args = [role] if role else ["--port", str(free_port())]
    done = run(args, tmp_path, **grpc)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert f"port {shared_port} on 127.0.0.1 is in use" in lines[-1], done.stderr
    assert lines[-1].startswith("toolnexus-serve"), done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_return_names_every_result_type() -> None:
    with pytest.raises(UnsupportedResult) as refused:
        final_change(42)
    for name in ("Done", "Artifact", "File", "Data", "Reply", "Ask", "NeedAuth", "Reject"):
        assert name in str(refused.value), name


def test_bound_to_every_interface_it_prints_and_serves_the_machines_own_names(
    tmp_path: Path,
) -> None:
    names = [name for name in own_names() if name != "127.0.0.1"]
    if not names:
        pytest.skip("this machine has no name or address besides loopback")
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen(
        [*toolnexus_serve(), "--host", "0.0.0.0", "--port", str(port)],
        cwd=tmp_path,
        env=clean_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    card = f"http://127.0.0.1:{port}/.well-known/agent-card.json"
    try:

        def answered() -> bool:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                return requests.get(card, timeout=2).ok
            except requests.ConnectionError:
                return False

        wait_for(answered, timeout=90, what="toolnexus-serve on 0.0.0.0")
        for name in names:
            shown = f"[{name}]" if ":" in name else name
            reply = requests.get(card, headers={"Host": f"{shown}:{port}"}, timeout=5)
            assert reply.status_code == 200, (name, reply.text)
        foreign = requests.get(card, headers={"Host": f"evil.example:{port}"}, timeout=5)
        assert foreign.status_code == 400
    finally:
        process.terminate()
        process.wait(20)
        log.close()
    said = (tmp_path / "serve.log").read_text()
    starting = said.split("starting:")[1].split("\n")[0]
    assert "0.0.0.0" not in starting
    # Honest: the embedded server has no broker, queue or time limit to name.
    assert not {"broker", "queue", "time_limit"} & {item.split()[0] for item in starting.split(",")}
    assert f"http://127.0.0.1:{port}/" in said
    assert any(f"http://{name}:{port}/" in said for name in names if ":" not in name), said
