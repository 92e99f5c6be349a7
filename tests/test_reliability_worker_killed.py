"""Scenario: a worker is SIGKILLed midway through 200 tasks.

Two Celery workers (the compose file's command, four processes each) share
200 tasks of about 0.3 s against a private Redis; one is killed with
SIGKILL midway. Every task the front end handed out must read back, end in
a terminal state (completed, or failed by the reaper), and none may stay
`working`. The tasks that were running when the worker died must be
terminal within the stale threshold plus two beat intervals.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from shared.redis_store import redis_store
from shared.task import COMPLETED, FAILED, TERMINAL_STATES, state_of
from tests.support.a2a import send_text, wait_ready
from tests.support.compose import LocalStack, local_stack
from tests.support.polling import wait_for

TASKS = 200
STALE_AFTER, REAP_EVERY = 3.0, 1.0
SETTINGS = {
    "TOOLNEXUS_RUN": "examples.agents:slow",
    "TOOLNEXUS_CONCURRENCY": "4",
    "TOOLNEXUS_HEARTBEAT": "0.25",
    "TOOLNEXUS_STALE_AFTER": str(STALE_AFTER),
    "TOOLNEXUS_REAP_EVERY": str(REAP_EVERY),
}


def epoch(task: dict) -> float:
    return datetime.fromisoformat(task["status"]["timestamp"].replace("Z", "+00:00")).timestamp()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[LocalStack]:
    with local_stack(tmp_path, SETTINGS) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("beat")
        for name in ("worker-a", "worker-b"):
            stack.start("worker", as_name=name, args=[f"--hostname={name}@%h"])
        yield stack


def test_no_task_is_lost_when_a_worker_is_killed(stack: LocalStack) -> None:
    wait_ready(stack.web_url)
    ids = [send_text(stack.web_url, f"0.3 task {n}")["id"] for n in range(TASKS)]
    store = redis_store(stack.store_url)

    def finished() -> list[str]:
        return [i for i in ids if (t := store.get(i)) and state_of(t) in TERMINAL_STATES]

    wait_for(lambda: len(finished()) >= TASKS // 3, timeout=60, what="a third of the tasks")
    running_at_kill = set(store.stale(float("inf")))
    killed_at = time.time()
    stack.processes["worker-a"].kill()

    wait_for(lambda: len(finished()) == TASKS, timeout=120, what="every task to end")
    tasks = {i: store.get(i) for i in ids}
    lost = [i for i, t in tasks.items() if t is None]
    states = Counter(state_of(t) for t in tasks.values() if t is not None)
    reaped = [i for i, t in tasks.items() if t and state_of(t) == FAILED]
    late = {
        i: round(epoch(tasks[i]) - killed_at, 2)
        for i in running_at_kill
        if epoch(tasks[i]) - killed_at > STALE_AFTER + 2 * REAP_EVERY
    }
    print(
        f"\nworker killed: sent {TASKS}, terminal {sum(states.values())}, lost {len(lost)},"
        f" states {dict(states)}, running at the kill {len(running_at_kill)},"
        f" reaped {len(reaped)}, later than stale+2 beats: {late}"
    )
    assert lost == []
    assert set(states) <= {COMPLETED, FAILED}
    assert store.stale(float("inf")) == []  # nothing left working
    for task_id in reaped:
        text = tasks[task_id]["status"]["message"]["parts"][0]["text"]
        assert text.startswith("worker lost: no heartbeat"), text
        assert task_id in running_at_kill
    assert 0 < len(reaped) <= 4  # worker-a had at most its four processes' tasks running
    assert late == {}
