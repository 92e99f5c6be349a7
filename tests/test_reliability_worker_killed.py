"""Scenario: a worker is SIGKILLed midway through 200 tasks.

Two Celery workers (the compose file's command, four processes each) share
200 tasks of about 0.3 s against a private Redis; one is killed with
SIGKILL midway. Every task the front end handed out must read back, end in
a terminal state (completed, or failed by the reaper), and none may stay
`working`; the tasks the reaper failed must be ones that were running on
the killed worker, and every task left running at the kill ends within the
stale threshold plus two reap intervals of it (a deadline, with a margin for
this machine's scheduling). How soon exactly is a time, measured by
bench/recovery.py, not asserted here (a loaded machine is slow, not wrong).
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from shared.task import COMPLETED, FAILED, TERMINAL_STATES, state_of
from tests.support.a2a import send_text, wait_ready
from tests.support.compose import Backends, LocalStack, ServiceProcess, local_stack
from tests.support.polling import wait_for

# Generous deadlines inside.
# Also on RabbitMQ in CI (tests/support/matrix.py): there a dead worker's
# unacknowledged messages come back at once, to the other worker.
pytestmark = [pytest.mark.timeout(360), pytest.mark.matrix(ci=True)]

TASKS = 200
STALE_AFTER, REAP_EVERY = 3.0, 1.0
# A task whose worker died is stale once its last heartbeat (at the kill at
# the latest) is STALE_AFTER old, and the next reap pass fails it: one
# interval, and a second for a pass under way or a late tick. MARGIN is for
# the suite's own scheduling, not the reaper's: beat shares the machine's
# cores with eight worker processes, the front end, the store and any other
# test process, so a pass that is due can start late by the time slices it
# waits for, then takes its store round trips (a query and one write per task).
MARGIN = 2.0
ENDED_WITHIN = STALE_AFTER + 2 * REAP_EVERY + MARGIN  # seconds after the kill
SETTINGS = {
    "TOOLNEXUS_RUN": "examples.agents:slow",
    "TOOLNEXUS_CONCURRENCY": "4",
    "TOOLNEXUS_HEARTBEAT": "0.25",
    "TOOLNEXUS_STALE_AFTER": str(STALE_AFTER),
    "TOOLNEXUS_REAP_EVERY": str(REAP_EVERY),
}


def epoch(task: dict[str, Any] | None) -> float:
    assert task is not None
    stamp = task["status"]["timestamp"].replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


def killed_for_good(service: ServiceProcess) -> None:
    """SIGKILL the service's whole process group and return once no process
    of it is left: from then on none of it can write to the store."""
    group = service.process.pid
    service.kill()
    service.process.wait(60)

    def gone() -> bool:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        return False

    wait_for(gone, timeout=60, what=f"every process of {service.name} to be gone")


@pytest.fixture
def stack(tmp_path: Path, backends: Backends) -> Iterator[LocalStack]:
    with local_stack(tmp_path, SETTINGS, backends=backends) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("beat")
        for name in ("worker-a", "worker-b"):
            stack.start("worker", as_name=name, args=[f"--hostname={name}@%h"])
        yield stack


def logged(service: ServiceProcess, pattern: re.Pattern[str]) -> int:
    """How many of the service's log lines match `pattern`."""
    return len(pattern.findall(service.output()))


# Celery's own lines for each task a worker took from the queue and ended.
RECEIVED = re.compile(r"Task toolnexus\.fulfil\[[^]]+\] received")
ENDED = re.compile(r"Task toolnexus\.fulfil\[[^]]+\] (?:succeeded|failed|raised)")
READY = re.compile(r"@\S+ ready\.")


def test_no_task_is_lost_when_a_worker_is_killed(stack: LocalStack) -> None:
    wait_ready(stack.web_url)
    workers = [stack.processes[name] for name in ("worker-a", "worker-b")]
    # Both workers consume before the first send, or one started late on a
    # busy machine finds the queue in the other's prefetch and runs nothing.
    for worker in workers:
        ready = functools.partial(logged, worker, READY)
        wait_for(ready, timeout=60, what=f"{worker.name} to be ready")
    ids = [send_text(stack.web_url, f"0.3 task {n}")["id"] for n in range(TASKS)]
    store = stack.open_store()

    def finished() -> list[str]:
        return [i for i in ids if (t := store.get(i)) and state_of(t) in TERMINAL_STATES]

    # The kill comes midway, while worker-a has tasks of its own: watched in
    # the workers' logs, which a loaded machine reads in milliseconds (reading
    # the 200 tasks took seconds there, and the queue was empty by then).
    wait_for(
        lambda: sum(logged(w, ENDED) for w in workers) >= TASKS // 3 or None,
        timeout=120,
        what="a third of the tasks",
    )
    wait_for(
        lambda: logged(workers[0], RECEIVED) > logged(workers[0], ENDED),
        timeout=60,
        what="a task taken by worker-a and not ended",
    )
    killed_at = time.time()
    killed_for_good(stack.processes["worker-a"])
    # Taken once the killed worker is wholly gone, so it holds every task it
    # left running (and those worker-b runs now); taken before the kill it
    # missed any task worker-a began in between.
    running_after_kill = set(store.stale(float("inf")))

    wait_for(lambda: len(finished()) == TASKS, timeout=240, what="every task to end")
    tasks = {i: store.get(i) for i in ids}
    lost = [i for i, t in tasks.items() if t is None]
    states = Counter(state_of(t) for t in tasks.values() if t is not None)
    reaped = [i for i, t in tasks.items() if t and state_of(t) == FAILED]
    ended = [epoch(tasks[i]) - killed_at for i in reaped]  # the figure printed
    print(
        f"\nworker killed: sent {TASKS}, terminal {sum(states.values())}, lost {len(lost)},"
        f" states {dict(states)}, working just after the kill {len(running_after_kill)},"
        f" reaped {len(reaped)}, the last {max(ended, default=0):.2f} s after the kill"
        f" (stale threshold {STALE_AFTER:g} s, beat every {REAP_EVERY:g} s)"
    )
    assert lost == []
    assert set(states) <= {COMPLETED, FAILED}
    assert store.stale(float("inf")) == []  # nothing left working
    # Every task left running at the kill (the killed worker's, failed by the
    # reaper; the other worker's, completed) ended by the deadline.
    late = {
        task_id: round(after, 2)
        for task_id in running_after_kill
        if (after := epoch(tasks.get(task_id)) - killed_at) > ENDED_WITHIN
    }
    assert late == {}, f"ended later than {ENDED_WITHIN:g} s after the kill: {late}"
    for task_id in reaped:
        text = tasks[task_id]["status"]["message"]["parts"][0]["text"]
        assert text.startswith("worker lost: no heartbeat"), text
        assert task_id in running_after_kill
    assert 0 < len(reaped) <= 4  # worker-a had at most its four processes' tasks running
