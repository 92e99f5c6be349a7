"""Bounded by default: finished tasks are forgotten after the default time to
live, and tasks left waiting for input are failed after the input timeout,
on every store; nothing else is touched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared import Settings
from shared.errors import ConfigError
from shared.events import to_state
from shared.store.wiring import open_store
from shared.stores.redis.store import redis_store
from shared.task import COMPLETED, FAILED, INPUT_REQUIRED, WORKING, new_task, state_of, text_message
from shared.transitions import transition
from tests.support.polling import wait_for
from tests.support.store_kinds import Stores
from tests.test_stores_events import Clock
from worker.engine.reaper import sweep

DAY = 24 * 3600.0


def test_finished_tasks_are_kept_seven_days_and_input_waits_one_by_default() -> None:
    defaults = Settings()
    assert defaults.task_ttl == 7 * DAY
    assert defaults.input_timeout == DAY
    forever = Settings.from_env({"TOOLNEXUS_TASK_TTL": "0", "TOOLNEXUS_INPUT_TIMEOUT": "0"})
    assert (forever.task_ttl, forever.input_timeout) == (None, None)
    with pytest.raises(ConfigError, match="TOOLNEXUS_INPUT_TIMEOUT"):
        Settings.from_env({"TOOLNEXUS_INPUT_TIMEOUT": "-5"})


def store_of(store_kind: str, clock: Clock, stores: Stores) -> Any:
    return stores.open(store_kind, clock=clock, terminal_ttl=Settings().task_ttl)


def a_task(store: Any, *states: str) -> str:
    task_id: str = store.create(new_task(text_message("user", "hi"))).task["id"]
    for state in states:
        assert transition(store, task_id, to_state(state)).applied
    return task_id


def test_the_default_ttl_forgets_finished_tasks_only(store_kind: str, stores: Stores) -> None:
    clock = Clock()
    store = store_of(store_kind, clock, stores)
    old = a_task(store, WORKING, COMPLETED)
    running = a_task(store, WORKING)
    waiting = a_task(store, WORKING, INPUT_REQUIRED)
    clock.now += 6 * DAY
    recent = a_task(store, WORKING, COMPLETED)
    if store_kind == "redis":
        # Redis expires keys by its own clock, not the injected one: the TTL it
        # was given is the default (that it expires by it: the test below).
        ttl = store.client.ttl(f"toolnexus:task:{old}")
        assert 7 * DAY - 60 < ttl <= 7 * DAY
        assert store.client.ttl(f"toolnexus:task:{running}") == -1  # kept: not finished
        assert store.client.ttl(f"toolnexus:task:{waiting}") == -1
        return
    clock.now += DAY + 1  # the first finished task is past seven days; the other is not
    assert store.get(old) is None
    assert store.purge_expired() == 1
    assert [store.get(i) is not None for i in (running, waiting, recent)] == [True] * 3
    assert store.events(old, 0) == []


def test_redis_forgets_a_finished_task_by_its_own_clock_and_keeps_unfinished_ones(
    redis_url: str,
) -> None:
    """A real, short TTL: Redis's clock is not one a test can move."""
    store = redis_store(redis_url, terminal_ttl=1)
    running = a_task(store, WORKING)
    waiting = a_task(store, WORKING, INPUT_REQUIRED)
    done = a_task(store, WORKING, COMPLETED)  # finished last: it expires after any other
    keys = {f"toolnexus:{part}:{done}" for part in ("task", "tail", "log", "hist")}
    assert store.get(done) is not None
    assert store.client.exists(*keys) > 0

    def forgotten() -> bool:
        return store.get(done) is None and store.client.exists(*keys) == 0

    wait_for(forgotten, timeout=30, what="Redis to expire the finished task's keys")
    assert store.events(done, 0) == []
    assert state_of(store.get(running)) == WORKING  # unfinished: still there
    assert state_of(store.get(waiting)) == INPUT_REQUIRED
    for task_id in (running, waiting):
        for part in ("task", "log", "hist"):
            assert store.client.ttl(f"toolnexus:{part}:{task_id}") == -1  # and never to expire
    assert store.purge_expired() == 1  # its listing entries go with it


def test_a_task_left_waiting_for_input_is_failed_after_the_timeout_and_nothing_else(
    store_kind: str, stores: Stores
) -> None:
    clock = Clock()
    store = store_of(store_kind, clock, stores)
    timeout = Settings().input_timeout
    assert timeout is not None
    forgotten = a_task(store, WORKING, INPUT_REQUIRED)
    running = a_task(store, WORKING)
    done = a_task(store, WORKING, COMPLETED)
    clock.now += timeout - 60
    answered_late = a_task(store, WORKING, INPUT_REQUIRED)  # asked a minute before the sweep
    clock.now += 61
    sweep(store, lambda _: None, clock.now, stale_after=10 * DAY, input_timeout=timeout)
    task = store.get(forgotten)
    assert state_of(task) == FAILED
    said = task["status"]["message"]["parts"][0]["text"]
    assert "TOOLNEXUS_INPUT_TIMEOUT" in said and f"{timeout:g} s" in said
    assert [state_of(store.get(i)) for i in (running, done, answered_late)] == [
        WORKING,
        COMPLETED,
        INPUT_REQUIRED,
    ]
    # A second sweep finds nothing more; without a timeout nothing is failed.
    sweep(store, lambda _: None, clock.now, stale_after=10 * DAY, input_timeout=timeout)
    clock.now += 2 * timeout
    sweep(store, lambda _: None, clock.now, stale_after=10 * DAY, input_timeout=None)
    assert state_of(store.get(answered_late)) == INPUT_REQUIRED


def test_a_store_opened_from_the_settings_has_the_default_ttl(tmp_path: Path) -> None:
    store: Any = open_store(Settings(store=f"file:{tmp_path / 'tasks'}"))
    done = a_task(store, WORKING, COMPLETED)
    ((expires,),) = store.database.read("SELECT expires FROM tasks WHERE id = ?", (done,))
    assert expires > store._clock() + 7 * DAY - 60
