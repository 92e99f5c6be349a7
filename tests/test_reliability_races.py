"""Racing writers: exactly one terminal state per task, never changed after.

Two races, 1000 trials each, on the Redis, memory and PostgreSQL stores, with
the real code on both sides:
- cancel (the front end's `Tasks.cancel`) against completion (the worker's
  `fulfil` returning its result at the same instant);
- the reaper (`reap_stale`) against a late finish of a task it found stale.
The on_task hook must fire exactly once per task, from whichever side won.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from shared import Settings, TaskNotCancelable
from shared.store.wiring import load_hook
from shared.task import CANCELED, COMPLETED, FAILED, new_task, text_message
from tests.support.store_kinds import Stores, for_many_trials
from web.core.tasks import Tasks
from worker.engine.agent import Agent
from worker.engine.fulfil import fulfil
from worker.engine.reaper import reap_stale

TRIALS = 1000
MAX_TRIALS = 5000
HOOK_CALLS: Counter[str] = Counter()


def record_hook(task_id: str, state: str, task: dict[str, Any]) -> None:
    """TOOLNEXUS_ON_TASK for the front end: counts terminal notifications."""
    HOOK_CALLS[task_id] += 1


class Inert:
    """A dispatcher with nothing behind it: these tests drive `fulfil` directly."""

    def enqueue(self, task_id: str) -> None: ...

    def revoke(self, task_id: str) -> None: ...

    def check(self) -> None: ...


@pytest.fixture
def store_factory(store_kind: str, stores: Stores) -> Callable[..., Any]:
    return lambda clock=None: stores.open(store_kind, clock=clock)


def start_finishing(
    store: Any, task_id: str, settings: Settings, delay: float
) -> tuple[threading.Thread, list[str]]:
    """Run `fulfil` in a thread whose function returns the moment this call
    does (after `delay`), so the caller's next write races the worker's
    completion."""
    gate = threading.Barrier(2)
    finished: list[str] = []

    def run(text: str) -> dict[str, str]:
        gate.wait()
        time.sleep(delay)
        return {"text": f"done: {text}"}

    agent = Agent(run=run, on_task=record_hook)
    worker = threading.Thread(
        target=lambda: finished.append(fulfil(store, task_id, agent, settings))
    )
    worker.start()
    gate.wait()
    return worker, finished


def assert_final(store: Any, task_id: str, winner: str, snapshot: dict[str, Any]) -> None:
    """The winner's state is stored, and no later writer can change it."""
    assert snapshot["status"]["state"] == winner
    web = Tasks(Settings(), store, Inert())
    with pytest.raises(TaskNotCancelable):
        web.cancel(task_id, "")
    assert reap_stale(store, 1e12, 1.0) == []
    assert store.get(task_id) == snapshot


# One trial: start a race on a fresh task and return (task id, whether the
# non-worker side says it won, the worker's reported final state).
Trial = Callable[[Any, Settings, float, float], tuple[str, bool, list[str]]]


def round_trip(store: Any) -> float:
    """The median time of one read from `store`, in seconds."""
    timings = []
    for _ in range(50):
        started = time.perf_counter()
        store.get("no-such-task")
        timings.append(time.perf_counter() - started)
    return sorted(timings)[len(timings) // 2]


def race(name: str, store: Any, settings: Settings, trial: Trial, other: str) -> None:
    """Run TRIALS races (more, up to MAX_TRIALS, until each side has won at
    least once, so a race that never really happens cannot pass) and check
    every outcome: one terminal state, each side knowing whether it won, the
    hook called once, and nothing changing it afterwards."""
    wins: Counter[str] = Counter()
    violations: list[str] = []
    trials = 0
    # Sides need different numbers of round trips before their write, so one
    # of them, at random, starts up to a few round trips late: both orders
    # then happen, and every interleaving in between.
    spread = max(4 * round_trip(store), 0.0005)
    while trials < TRIALS or (len(wins) < 2 and trials < MAX_TRIALS):
        trials += 1
        late = random.uniform(0, spread)
        worker_delay, other_delay = (late, 0.0) if random.random() < 0.5 else (0.0, late)
        task_id, other_won, finished = trial(store, settings, worker_delay, other_delay)
        snapshot = store.get(task_id)
        winner = snapshot["status"]["state"]
        wins[winner] += 1
        if winner not in (other, COMPLETED) or other_won != (winner == other):
            violations.append(task_id)
        if finished != [winner] or HOOK_CALLS[task_id] != 1:
            violations.append(task_id)
        assert_final(store, task_id, winner, snapshot)
    print(f"\n{name}: {trials} trials, winners {dict(wins)}, violations {len(violations)}")
    assert violations == []
    assert set(wins) == {other, COMPLETED}, f"one side never won in {trials} trials: {wins}"


def cancel_trial(
    store: Any, settings: Settings, worker_delay: float, delay: float
) -> tuple[str, bool, list[str]]:
    web = Tasks(settings, store, Inert(), load_hook(settings))
    task = store.save(new_task(text_message("user", "race")))
    worker, finished = start_finishing(store, task["id"], settings, worker_delay)
    time.sleep(delay)
    try:
        canceled = web.cancel(task["id"], "")["status"]["state"] == CANCELED
    except TaskNotCancelable:
        canceled = False
    worker.join()
    return task["id"], canceled, finished


def reaper_trial(
    store: Any, settings: Settings, worker_delay: float, delay: float
) -> tuple[str, bool, list[str]]:
    task = store.save(new_task(text_message("user", "late")))
    worker, finished = start_finishing(store, task["id"], settings, worker_delay)
    time.sleep(delay)
    reaped = reap_stale(store, now=1000.0, stale_after=10.0, on_terminal=record_hook)
    worker.join()
    snapshot = store.get(task["id"])
    if snapshot["status"]["state"] == FAILED:
        assert "worker lost" in snapshot["status"]["message"]["parts"][0]["text"]
        assert "artifacts" not in snapshot
    return task["id"], task["id"] in reaped, finished


# A thousand trials each: the stores whose round trips make that minutes long
# are opt-in (-m slow); tests/test_stores.py races their writers in CI.
@pytest.mark.parametrize("store_kind", for_many_trials())
def test_cancel_against_completion(store_factory: Callable[..., Any]) -> None:
    settings = Settings(on_task=f"{__name__}:record_hook")
    race("cancel vs completion", store_factory(), settings, cancel_trial, CANCELED)


@pytest.mark.parametrize("store_kind", for_many_trials())
def test_reaper_against_a_late_finish(store_factory: Callable[..., Any]) -> None:
    # Every heartbeat is written at time 0, so each working task is stale at 1000.
    store = store_factory(clock=lambda: 0.0)
    race("reaper vs late finish", store, Settings(), reaper_trial, FAILED)
