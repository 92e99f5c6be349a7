"""`toolnexus-serve db copy TARGET`: a deployment moved to another store.

Tasks in every kind of state are written by the file store, copied by the
real command into Redis and into PostgreSQL, then read there through the
store and through a real `toolnexus-serve` on the target, as a user would
after switching TOOLNEXUS_STORE. A second copy changes nothing; a task the
target holds differently is left alone and fails the copy.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shared.events import artifact_update, to_state
from shared.store.resolve import resolve_store
from shared.task import (
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    SUBMITTED,
    WORKING,
    new_task,
    text_message,
)
from shared.transitions import transition
from tests.support.a2a import get_task, wait_state
from tests.support.embedded import ROOT, embedded_server


def file_tasks(folder: Path) -> dict[str, Any]:
    """Seven tasks in the file store: finished with an artifact, waiting for
    input, working, and never started."""
    store = resolve_store(f"file:{folder}")
    made: list[str] = []
    for n in range(7):
        task_id = str(store.save(new_task(text_message("user", f"task {n}")))["id"])
        made.append(task_id)
        if n < 5:
            assert transition(store, task_id, to_state(WORKING)).applied
        if n < 3:
            artifact = {"artifactId": "out", "parts": [{"kind": "text", "text": f"result {n}"}]}
            assert transition(store, task_id, lambda t, a=artifact: [artifact_update(t, a)]).applied
            assert transition(store, task_id, to_state(COMPLETED)).applied
        elif n == 3:
            assert transition(store, task_id, to_state(INPUT_REQUIRED)).applied
    tasks = {task_id: store.get(task_id) for task_id in made}
    store.close()
    return tasks


def copy(source: str, target: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLNEXUS_")}
    return subprocess.run(
        [sys.executable, "-m", "worker.cli.main", "db", "copy", target],
        env={**env, "TOOLNEXUS_STORE": source, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@pytest.fixture(params=["redis", "postgres"])
def target(request: pytest.FixtureRequest) -> str:
    fixture = "redis_url" if request.param == "redis" else "postgres_url"
    return str(request.getfixturevalue(fixture))


def test_every_task_is_copied_once_and_served_from_the_target(tmp_path: Path, target: str) -> None:
    source = f"file:{tmp_path / 'tasks'}"
    tasks = file_tasks(tmp_path / "tasks")
    first = copy(source, target)
    assert first.returncode == 0, first.stderr
    assert "copied 7, already there and the same 0, already there and different 0" in first.stdout
    assert "copied while not at rest: 2 submitted, 1 working" in first.stdout
    store = resolve_store(target)
    assert {task_id: store.get(task_id) for task_id in tasks} == tasks
    store.close()

    again = copy(source, target)
    assert again.returncode == 0, again.stderr
    assert "copied 0, already there and the same 7, already there and different 0" in again.stdout

    # The service on the target: tasks at rest are served as they were; the
    # ones copied unfinished are taken up as after a restart (a submitted
    # one is run, a working one whose worker is gone is failed).
    liveness = {
        "TOOLNEXUS_HEARTBEAT": "0.5",
        "TOOLNEXUS_STALE_AFTER": "2",
        "TOOLNEXUS_REAP_EVERY": "0.5",
    }
    with embedded_server(tmp_path, {"TOOLNEXUS_STORE": target, **liveness}) as (host, port):
        url = f"http://{host}:{port}"
        for task_id, task in tasks.items():
            state = task["status"]["state"]
            if state in (COMPLETED, INPUT_REQUIRED):
                served = get_task(url, task_id)
                assert served["status"]["state"] == state
                assert served.get("artifacts") == task.get("artifacts")
            else:
                ended = wait_state(url, task_id, timeout=90)["status"]["state"]
                assert ended == (COMPLETED if state == SUBMITTED else FAILED)


def test_a_task_the_target_holds_differently_is_left_and_fails_the_copy(
    tmp_path: Path, redis_url: str
) -> None:
    source = f"file:{tmp_path / 'tasks'}"
    tasks = file_tasks(tmp_path / "tasks")
    task_id = next(iter(tasks))
    store = resolve_store(redis_url)
    theirs = {**tasks[task_id], "metadata": {"already": "here"}}
    store.save(theirs)
    result = copy(source, redis_url)
    assert result.returncode == 1
    assert "copied 6, already there and the same 0, already there and different 1" in result.stdout
    assert f"left as the target holds it: {task_id}" in result.stdout
    assert store.get(task_id) == theirs
    store.close()


def test_a_memory_store_is_refused_in_one_line(tmp_path: Path) -> None:
    result = copy("memory", f"file:{tmp_path}")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "memory store" in result.stderr
