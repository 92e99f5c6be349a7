"""`python -m worker.runtime.health`: the compose health checks' verdicts, one line each.

Run against real services in tests/test_compose_run.py; here the verdicts
and the command line's edges.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shared.settings import Settings
from shared.store.wiring import open_store
from shared.stores.file.store import file_store
from shared.stores.memory.store import memory_store
from tests.support.compose import ROOT
from tests.support.redis_server import free_port
from worker.runtime.health import beat_verdict, main


def test_beat_is_healthy_only_while_the_reaper_runs_on_time() -> None:
    store = memory_store()
    assert beat_verdict(store, 45, now=1000.0) == (
        False,
        "the reaper has not run yet: is beat running?",
    )
    store.record_beat()
    last = store.last_beat()
    assert last is not None
    assert beat_verdict(store, 45, now=last + 44)[0] is True
    healthy, reason = beat_verdict(store, 45, now=last + 46)
    assert not healthy and reason == "the reaper last ran 46 s ago (allowed 45 s)"


def test_a_store_with_no_beat_record_cannot_be_called_healthy() -> None:
    class Plain:
        def get(self, task_id: str) -> None:
            return None

        def save(self, task: object) -> object:
            return task

    healthy, reason = beat_verdict(open_store(Settings(), Plain()), 45, now=0.0)  # adapted
    assert not healthy and "cannot tell" in reason


def test_the_beat_check_reads_the_store_named_in_the_environment(tmp_path: Path) -> None:
    env = {"TOOLNEXUS_STORE": f"file:{tmp_path}", "TOOLNEXUS_REAP_EVERY": "5"}
    assert main(["beat"], env) == 1
    file_store(str(tmp_path)).record_beat()
    assert main(["beat"], env) == 0


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["beat"], {"TOOLNEXUS_REAP_EVERY": "soon"}, "beat: unhealthy: TOOLNEXUS_REAP_EVERY="),
        (["flower"], {"FLOWER_PORT": "PORT"}, "flower: unhealthy: flower does not answer"),
        (["nothing"], {}, ""),
        ([], {}, ""),
    ],
)
def test_every_failure_is_one_line_and_status_1(
    args: list[str], env: dict[str, str], said: str
) -> None:
    env = {key: value.replace("PORT", str(free_port())) for key, value in env.items()}
    result = subprocess.run(
        [sys.executable, "-m", "worker.runtime.health", *args],
        env={"PATH": "/usr/bin:/bin", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert output.count("\n") == 1 and "Traceback" not in output
    assert output.startswith(said or "usage: python -m worker.runtime.health")
