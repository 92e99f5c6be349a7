"""Racing writers: exactly one terminal state per task, never changed after.

Two races, 1000 trials each, on the Redis store and the memory store, with
the real code on both sides:
- cancel (the front end's `Tasks.cancel`) against completion (the worker's
  `fulfil` returning its result at the same instant);
- the reaper (`reap_stale`) against a late finish of a task it found stale.
The on_task hook must fire exactly once per task, from whichever side won.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from shared import Settings, TaskNotCancelable, resolve_store
from shared.memory_store import memory_store
from shared.redis_store import redis_store
from shared.task import CANCELED, COMPLETED, FAILED, TERMINAL_STATES, new_task, text_message
from web.methods import Tasks
from worker.agent import Agent
from worker.fulfil import fulfil
from worker.reaper import reap_stale

TRIALS = 1000
HOOK_CALLS: Counter[str] = Counter()


def record_hook(task_id: str, state: str, task: dict[str, Any]) -> None:
    """TOOLNEXUS_ON_TASK for the front end: counts terminal notifications."""
    HOOK_CALLS[task_id] += 1


class Inert:
    """A dispatcher with nothing behind it: these tests drive `fulfil` directly."""

    def enqueue(self, task_id: str) -> None: ...

    def revoke(self, task_id: str) -> None: ...

    def check(self) -> None: ...


@pytest.fixture(params=["redis", "memory"])
def store_factory(request: pytest.FixtureRequest) -> Callable[..., Any]:
    if request.param == "memory":
        return memory_store
    url = request.getfixturevalue("redis_url")
    return lambda clock=None: redis_store(url, clock=clock) if clock else resolve_store(url)


def start_finishing(
    store: Any, task_id: str, settings: Settings
) -> tuple[threading.Thread, list[str]]:
    """Run `fulfil` in a thread whose function returns the moment this call
    does, so the caller's next write races the worker's completion."""
    gate = threading.Barrier(2)
    finished: list[str] = []

    def run(text: str) -> dict[str, str]:
        gate.wait()
        return {"text": f"done: {text}"}

    agent = Agent(run=run, on_task=record_hook)
    worker = threading.Thread(
        target=lambda: finished.append(fulfil(store, task_id, agent, settings))
    )
    worker.start()
    gate.wait()
    return worker, finished


def report(name: str, wins: Counter[str], violations: list[str]) -> None:
    print(
        f"\n{name}: {TRIALS} trials, winners {dict(wins)},"
        f" terminal {sum(wins.values())}, violations {len(violations)}"
    )


def assert_final(store: Any, task_id: str, winner: str, snapshot: dict[str, Any]) -> None:
    """The winner's state is stored, and no later writer can change it."""
    assert snapshot["status"]["state"] == winner
    web = Tasks(Settings(), store, Inert())
    with pytest.raises(TaskNotCancelable):
        web.cancel(task_id)
    assert reap_stale(store, 1e12, 1.0) == []
    assert store.get(task_id) == snapshot


def test_cancel_against_completion(store_factory: Callable[..., Any]) -> None:
    store = store_factory()
    settings = Settings(on_task=f"{__name__}:record_hook")
    web = Tasks(settings, store, Inert())
    wins: Counter[str] = Counter()
    violations: list[str] = []
    for _ in range(TRIALS):
        task = store.save(new_task(text_message("user", "race")))
        worker, finished = start_finishing(store, task["id"], settings)
        try:
            canceled = web.cancel(task["id"])["status"]["state"] == CANCELED
        except TaskNotCancelable:
            canceled = False
        worker.join()
        snapshot = store.get(task["id"])
        winner = snapshot["status"]["state"]
        wins[winner] += 1
        # Exactly one side's write stands, and each side knows whether it won.
        if winner not in (CANCELED, COMPLETED) or canceled != (winner == CANCELED):
            violations.append(task["id"])
        if finished != [winner] or HOOK_CALLS[task["id"]] != 1:
            violations.append(task["id"])
        assert_final(store, task["id"], winner, snapshot)
    report("cancel vs completion", wins, violations)
    assert violations == []
    assert sum(wins.values()) == TRIALS


def test_reaper_against_a_late_finish(store_factory: Callable[..., Any]) -> None:
    # Every heartbeat is written at time 0, so each working task is stale at 1000.
    store = store_factory(clock=lambda: 0.0)
    settings = Settings()
    wins: Counter[str] = Counter()
    violations: list[str] = []
    for _ in range(TRIALS):
        task = store.save(new_task(text_message("user", "late")))
        worker, finished = start_finishing(store, task["id"], settings)
        reaped = reap_stale(store, now=1000.0, stale_after=10.0, on_terminal=record_hook)
        worker.join()
        snapshot = store.get(task["id"])
        winner = snapshot["status"]["state"]
        wins[winner] += 1
        if winner not in (FAILED, COMPLETED) or (task["id"] in reaped) != (winner == FAILED):
            violations.append(task["id"])
        if finished != [winner] or HOOK_CALLS[task["id"]] != 1:
            violations.append(task["id"])
        if winner == FAILED:
            assert "worker lost" in snapshot["status"]["message"]["parts"][0]["text"]
            assert "artifacts" not in snapshot
        assert_final(store, task["id"], winner, snapshot)
    report("reaper vs late finish", wins, violations)
    assert violations == []
    assert {state for state in wins} <= TERMINAL_STATES
