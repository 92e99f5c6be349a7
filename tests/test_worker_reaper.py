"""The reaper with an injected clock, on every built-in store."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from shared.errors import StoreError
from shared.events import to_state
from shared.settings import Settings
from shared.store.contract import Commit
from shared.store.wiring import open_store
from shared.stores.memory.store import memory_store
from shared.task import COMPLETED, Task, new_task, state_of, text_message
from shared.transitions import transition
from tests.support.polling import wait_for
from tests.support.shortcuts import with_status
from tests.support.store_kinds import SWEPT, Stores
from worker.engine.reaper import ReaperThread, reap_stale, sweep
from worker.engine.results import final_change


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clocked(store_kind: str, stores: Stores) -> tuple[Any, Clock]:
    clock = Clock()
    return stores.open(store_kind, clock=clock), clock


def save_in(store: Any, state: str) -> str:
    task = with_status(new_task(text_message("user", "x")), state)
    store.save(task)
    return str(task["id"])


def message(task: Task | None) -> str:
    assert task is not None
    return str(task["status"]["message"]["parts"][0]["text"])


def test_only_stale_working_tasks_are_failed(clocked: tuple[Any, Clock]) -> None:
    store, clock = clocked
    old = save_in(store, "working")
    clock.now += 50
    fresh = save_in(store, "working")
    waiting = save_in(store, "input-required")
    done = save_in(store, "completed")
    clock.now += 20  # old: 70 s without a heartbeat, fresh: 20 s

    assert reap_stale(store, clock.now, stale_after=60) == [old]

    assert state_of(store.get(old)) == "failed"
    assert message(store.get(old)) == "worker lost: no heartbeat for 60 s"
    assert "artifacts" not in (store.get(old) or {})
    for task_id, state in ((fresh, "working"), (waiting, "input-required"), (done, "completed")):
        assert state_of(store.get(task_id)) == state
    assert reap_stale(store, clock.now, stale_after=60) == []  # nothing twice


def test_a_heartbeat_keeps_a_task_off_the_list(clocked: tuple[Any, Clock]) -> None:
    store, clock = clocked
    task_id = save_in(store, "working")
    for _ in range(5):
        clock.now += 30
        store.heartbeat(task_id)
        assert reap_stale(store, clock.now, stale_after=60) == []
    clock.now += 61

    assert reap_stale(store, clock.now, stale_after=60) == [task_id]


def test_the_hook_hears_about_each_reaped_task(clocked: tuple[Any, Clock]) -> None:
    store, clock = clocked
    first, second = save_in(store, "working"), save_in(store, "working")
    clock.now += 100
    heard: list[tuple[str, str]] = []

    reaped = reap_stale(store, clock.now, 60, on_terminal=lambda i, s, t: heard.append((i, s)))

    assert sorted(reaped) == sorted([first, second])
    assert sorted(heard) == sorted([(first, "failed"), (second, "failed")])


def test_a_task_that_left_working_after_the_listing_is_left_alone(
    clocked: tuple[Any, Clock],
) -> None:
    """The stale list is read first; the task then asks for input before the
    reaper writes. The reaper's guarded transition must not fail it."""
    store, clock = clocked
    task_id = save_in(store, "working")
    clock.now += 100
    listed = store.stale(clock.now - 60)
    transition(store, task_id, to_state("input-required"))

    class Frozen:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def stale(self, cutoff: float) -> list[str]:
            return listed

    assert reap_stale(Frozen(), clock.now, 60) == []
    assert state_of(store.get(task_id)) == "input-required"


def test_a_task_the_store_cannot_write_keeps_no_other_stale_task_waiting(
    clocked: tuple[Any, Clock],
) -> None:
    """One stale task's row is locked (its write fails): the others are failed
    in the same run, and the locked one in the first run after it frees."""
    store, clock = clocked
    locked, others = save_in(store, "working"), [save_in(store, "working") for _ in range(2)]
    clock.now += 100
    lock = {"held": True}

    class Locking:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def commit(self, commit: Commit) -> bool:
            if lock["held"] and commit.task["id"] == locked:
                raise StoreError("canceling statement due to lock timeout")
            return bool(store.commit(commit))

    assert sorted(reap_stale(Locking(), clock.now, 60)) == sorted(others)
    assert state_of(store.get(locked)) == "working"
    lock["held"] = False
    assert reap_stale(Locking(), clock.now, 60) == [locked]


def race_reaper_against_worker(store: Any, task_id: str, now: float) -> dict[str, bool]:
    """Start the reaper and a finishing worker on one task at the same moment."""
    start = threading.Barrier(2)
    won: dict[str, bool] = {}

    def reap() -> None:
        start.wait()
        won["reaper"] = task_id in reap_stale(store, now, 60)

    def finish() -> None:
        start.wait()
        outcome = transition(store, task_id, final_change("done"), from_states={"working"})
        won["worker"] = outcome.applied

    threads = [threading.Thread(target=reap), threading.Thread(target=finish)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return won


def test_reaper_and_a_finishing_worker_race_to_exactly_one_terminal_state(
    clocked: tuple[Any, Clock],
) -> None:
    store, clock = clocked
    for _ in range(50):
        task_id = save_in(store, "working")
        clock.now += 100

        won = race_reaper_against_worker(store, task_id, clock.now)

        assert sorted(won.values()) == [False, True]
        final = state_of(store.get(task_id))
        assert final == (COMPLETED if won["worker"] else "failed")


def test_a_store_without_a_stale_index_reaps_nothing() -> None:
    tasks: dict[str, Task] = {}
    minimal = type("Minimal", (), {"get": lambda s, i: tasks.get(i), "save": lambda s, t: t})()

    assert reap_stale(open_store(Settings(), minimal), 1e12, 60) == []  # adapted by the wiring


def test_the_reaper_thread_reaps_on_its_interval() -> None:
    clock = Clock()
    store = memory_store(clock)
    task_id = save_in(store, "working")
    clock.now += 100
    reaper = ReaperThread(
        store, lambda task_id: None, every=0.05, stale_after=60, clock=clock
    ).start()
    try:
        wait_for(lambda: state_of(store.get(task_id) or {}) == "failed", what="the reaper")
    finally:
        reaper.stop()


@pytest.mark.parametrize("store_kind", SWEPT)
def test_the_reaper_s_sweep_purges_finished_tasks_past_their_time_to_live(
    store_kind: str, stores: Stores
) -> None:
    # Stores that do not expire tasks by themselves are swept: through the
    # reaper's own run (`sweep`, what beat and the embedded server call),
    # not only by calling purge_expired() by hand.
    clock = Clock()
    store = stores.open(store_kind, clock=clock, terminal_ttl=60)
    finished, running, later = (save_in(store, "working") for _ in range(3))
    for task_id in (finished, later):
        transition(store, task_id, to_state(COMPLETED))
    store.heartbeat(running)
    clock.now += 30
    sent: list[str] = []

    sweep(store, sent.append, clock(), stale_after=3600)
    assert {finished, running, later} <= set(store.all())  # nothing past its time yet

    clock.now += 31  # 61 s after they finished
    store.heartbeat(running)
    sweep(store, sent.append, clock(), stale_after=3600)

    assert store.get(finished) is None and store.get(later) is None
    assert set(store.all()) == {running}  # a running task is never purged
    assert store.events(finished, 0) == []  # its log went with it
    assert sent == []
