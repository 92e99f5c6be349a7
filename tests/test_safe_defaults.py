"""Start-up defaults that keep an operator out of trouble, tried as a user would:
the real commands as subprocesses.

- gunicorn, a Celery worker and beat refuse the per-process memory store
  (the embedded server keeps it as its default);
- two workers started without `-n` on one host get different node names;
- an out-of-range port is one line and status 2, for toolnexus-serve and
  for gunicorn; `toolnexus-serve --version` answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest
from celery import Celery

from tests.support.polling import wait_for

ROOT = Path(__file__).resolve().parent.parent


def clean_env(**variables: str) -> dict[str, str]:
    """This environment without any TOOLNEXUS_* (so every default applies), plus `variables`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLNEXUS_")}
    return {**env, **variables, "PYTHONPATH": str(ROOT)}


def one_line_exit(command: list[str], env: dict[str, str]) -> str:
    """Run `command`; it must exit with status 2 and one line on stderr, returned."""
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert len(lines) == 1, lines
    return lines[0]


GUNICORN = [
    sys.executable,
    "-m",
    "gunicorn",
    "-c",
    "python:web.http.gunicorn_conf",
    "web:create_app()",
]
CELERY = [sys.executable, "-m", "celery", "-A", "worker"]


@pytest.mark.parametrize(
    "command",
    [GUNICORN, [*CELERY, "worker"], [*CELERY, "beat"]],
    ids=["gunicorn", "worker", "beat"],
)
def test_the_memory_store_is_refused_by_every_shared_process(command: list[str]) -> None:
    line = one_line_exit(command, clean_env())
    assert line.startswith("toolnexus: TOOLNEXUS_STORE=memory is private to each process")
    assert "set TOOLNEXUS_STORE to a redis:// URL or file:<dir>" in line


def test_gunicorn_refuses_a_port_out_of_range_in_one_line() -> None:
    line = one_line_exit(GUNICORN, clean_env(TOOLNEXUS_PORT="99999"))
    assert line == "toolnexus: TOOLNEXUS_PORT='99999': must be a port number from 1 to 65535"


def test_toolnexus_serve_refuses_a_port_out_of_range_in_one_line() -> None:
    command = [sys.executable, "-m", "worker.embedded", "--port", "99999"]
    line = one_line_exit(command, clean_env())
    assert line == "toolnexus-serve: TOOLNEXUS_PORT='99999': must be a port number from 1 to 65535"


def test_toolnexus_serve_tells_its_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "worker.embedded", "--version"],
        env=clean_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"toolnexus-serve {metadata.version('toolnexus-serve')}"


@pytest.fixture
def two_workers(redis_url: str, tmp_path: Path) -> Iterator[tuple[Celery, list[Path]]]:
    """Two `celery -A worker worker` as the README starts them, without -n."""
    env = clean_env(
        TOOLNEXUS_STORE=redis_url, TOOLNEXUS_BROKER_URL=redis_url, TOOLNEXUS_CONCURRENCY="1"
    )
    logs = [tmp_path / f"worker{n}.log" for n in (1, 2)]
    processes = []
    for log in logs:
        with log.open("wb") as output:
            processes.append(
                subprocess.Popen(
                    [*CELERY, "worker", "-l", "INFO"],
                    env=env,
                    cwd=ROOT,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    client = Celery(broker=redis_url, set_as_current=False)
    try:
        yield client, logs
    finally:
        client.close()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def test_two_workers_on_one_host_get_different_node_names(
    two_workers: tuple[Celery, list[Path]],
) -> None:
    client, logs = two_workers
    names: set[str] = set()

    def both_answer() -> set[str] | None:
        # Every name that answered any ping: a loaded worker may miss one
        # ping's second, and both need not answer the same one.
        names.update(name for reply in client.control.ping(timeout=1.0) for name in reply)
        return names if len(names) == 2 else None

    names = wait_for(both_answer, timeout=60, what="both workers to answer a ping")
    assert all(name.startswith("worker-") for name in names), names
    assert not any(name.startswith("celery@") for name in names)
    for log in logs:
        assert "DuplicateNodenameWarning" not in log.read_text()


def test_gunicorn_gathers_access_lines_only_for_an_access_log() -> None:
    from gunicorn.glogging import Logger

    from web.http.gunicorn_worker import AccessOnRequestLogger

    def enabled(kind: type[Logger], accesslog: str | None) -> bool:
        logger = kind.__new__(kind)  # no setup: only the decision is under test
        logger.cfg = SimpleNamespace(
            accesslog=accesslog,
            logconfig=None,
            logconfig_dict={"version": 1},  # web.http.gunicorn_conf always sets one
            logconfig_json=None,
            syslog=False,
            disable_redirect_access_to_syslog=False,
        )
        return bool(logger._compute_access_log_enabled())

    assert enabled(Logger, None)  # gunicorn's own: every request's atoms, then dropped
    assert not enabled(AccessOnRequestLogger, None)
    assert enabled(AccessOnRequestLogger, "-")
