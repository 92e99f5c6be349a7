"""The I/O modes in one process: the watch's callback for event loops on every
built-in store, I/O calls' time limit and cancel run through `fulfil`, the
choice of pool and its sizes, and the pool's info for Flower.

tests/test_worker_pools.py runs the same through real Celery workers.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from prometheus_client import REGISTRY

from shared.attempts import run_of
from shared.errors import ConfigError
from shared.events import to_state
from shared.settings import Settings
from shared.store.spec import POOL_SIZE
from shared.store.wiring import is_full_store
from shared.stores.memory.store import memory_store
from shared.task import CANCELED, COMPLETED, FAILED, new_task, state_of, text_message
from shared.transitions import transition
from tests.support.polling import wait_for
from tests.support.store_kinds import Stores
from worker.engine.agent import Agent
from worker.engine.fulfil import fulfil
from worker.engine.io_calls import io_call_count
from worker.engine.retries import end_without_outcome
from worker.runtime.app import celery_config
from worker.runtime.pools import IO_POOL_CLASS, IOPool, store_connections


@pytest.fixture
def event_store(store_kind: str, stores: Stores) -> Any:
    return stores.open(store_kind)


def submitted(store: Any, text: str = "hi") -> str:
    task = new_task(text_message("user", text))
    store.save(task)
    return str(task["id"])


def test_a_watch_calls_back_on_every_wake_up_and_at_once_if_already_woken(
    event_store: Any,
) -> None:
    assert is_full_store(event_store)
    task_id = submitted(event_store)
    with event_store.watch(task_id) as watch:
        working = transition(event_store, task_id, to_state("working"))
        assert working.applied and working.record is not None
        early = threading.Event()
        # Woken before anyone asked for a callback: it is called at once (or
        # as soon as the store's own delivery of that wake-up arrives).
        watch.on_wake(early.set)
        assert early.wait(10)

        # Every wake-up of the task's earlier writes is handled before the
        # cancel: a later write to another task is heard after them (in the
        # writer's own call in memory and files, in order on Redis's listener).
        other_id = submitted(event_store)
        with event_store.watch(other_id) as other:
            marked = transition(event_store, other_id, to_state("working"))
            assert marked.applied and marked.record is not None
            assert other.wait(10, after=marked.record.seq - 1)

        # A wake-up carries no data: each call reads what the task logged past
        # `working`, so only a call made once the cancel is logged counts.
        since = working.record.seq
        logged: list[bool] = []
        watch.on_wake(lambda: logged.append(bool(event_store.events(task_id, since))))
        assert transition(event_store, task_id, to_state(CANCELED)).applied
        wait_for(lambda: any(logged), timeout=10, what="a call back that reads the cancel")


# --- I/O calls, in process --------------------------------------------------------


def run_io_call(store: Any, task_id: str, agent: Agent, settings: Settings) -> list[str]:
    outcome: list[str] = []
    thread = threading.Thread(
        target=lambda: outcome.append(fulfil(store, task_id, agent, settings, io_pool=True))
    )
    thread.start()
    return outcome


async def sleeps(text: str) -> str:
    try:
        await asyncio.sleep(float(text))
    except asyncio.CancelledError:
        seen.append("cancelled")
        raise
    return "slept"


seen: list[str] = []


def test_an_io_call_s_coroutine_past_its_time_limit_is_cancelled_and_fails() -> None:
    seen.clear()
    store = memory_store()
    task_id = submitted(store, "60")
    outcome = run_io_call(store, task_id, Agent(sleeps), Settings(time_limit=0.3))

    wait_for(lambda: outcome, timeout=30, what="the I/O call to end")
    task = store.get(task_id)
    assert outcome == [FAILED] and task is not None
    assert task["status"]["message"]["parts"][0]["text"] == "timed out after 0.3 s"
    assert seen == ["cancelled"]
    wait_for(lambda: io_call_count() == 0, timeout=10, what="the call released")


def test_a_cancel_stops_an_io_call_s_coroutine() -> None:
    seen.clear()
    store = memory_store()
    task_id = submitted(store, "60")
    outcome = run_io_call(store, task_id, Agent(sleeps), Settings(time_limit=120))
    wait_for(
        lambda: state_of(store.get(task_id) or {}) == "working" and io_call_count(), timeout=10
    )
    # What /metrics shows meanwhile (a worker serves this registry on TOOLNEXUS_METRICS_PORT).
    assert REGISTRY.get_sample_value("toolnexus_io_calls") == io_call_count() == 1

    assert transition(store, task_id, to_state(CANCELED)).applied
    wait_for(lambda: outcome, timeout=30, what="the cancelled call to end")
    assert outcome == [CANCELED]
    assert seen == ["cancelled"]
    assert state_of(store.get(task_id) or {}) == CANCELED
    wait_for(lambda: REGISTRY.get_sample_value("toolnexus_io_calls") == 0, timeout=10)


def test_an_io_call_whose_task_was_released_stops_and_leaves_it_to_the_next_attempt() -> None:
    """A run that lost its task (released for another attempt, say after a
    pause past the stale threshold) stops as after a cancel, and its time
    limit, when it comes, fails nobody's task."""
    seen.clear()
    store = memory_store()
    task_id = submitted(store, "60")
    settings = Settings(time_limit=120, max_attempts=3)
    outcome = run_io_call(store, task_id, Agent(sleeps), settings)
    wait_for(
        lambda: state_of(store.get(task_id) or {}) == "working" and io_call_count(), timeout=10
    )

    ended = end_without_outcome(store, task_id, settings.attempts, "worker lost", epoch=0)

    assert ended.retry_in is not None
    wait_for(lambda: outcome, timeout=30, what="the released call to end")
    assert seen == ["cancelled"]
    task = store.get(task_id)
    assert state_of(task or {}) == "working" and run_of(task or {}).attempt == 2


def test_a_blocking_call_past_its_time_limit_is_failed_and_its_result_dropped() -> None:
    release = threading.Event()

    def blocks(text: str) -> str:
        release.wait(60)
        return "too late"

    store = memory_store()
    task_id = submitted(store)
    outcome = run_io_call(store, task_id, Agent(blocks), Settings(time_limit=0.3))
    wait_for(lambda: state_of(store.get(task_id) or {}) == FAILED, timeout=30, what="time-out")
    release.set()
    wait_for(lambda: outcome, timeout=30, what="the blocking call to return")
    task = store.get(task_id)
    assert outcome == [FAILED] and task is not None
    assert "artifacts" not in task  # "too late" was dropped


# --- choosing the pool ------------------------------------------------------------


def test_the_pool_setting_names_its_choices_and_gevent_is_refused_clearly() -> None:
    assert Settings().pool == "prefork"
    with pytest.raises(
        ConfigError, match=r"TOOLNEXUS_POOL='gevent': gevent is not supported .*use threads"
    ):
        Settings.from_env({"TOOLNEXUS_POOL": "gevent"})
    with pytest.raises(ConfigError, match=r"use one of prefork, threads, asyncio"):
        Settings.from_env({"TOOLNEXUS_POOL": "eventlet"})


@pytest.mark.parametrize(
    ("pool", "concurrency", "celery_pool", "calls", "connections"),
    [
        ("prefork", None, "prefork", None, None),
        ("prefork", 4, "prefork", 4, None),
        ("asyncio", None, IO_POOL_CLASS, 100, 108),
        ("asyncio", 10, IO_POOL_CLASS, 10, POOL_SIZE),
        ("threads", 1000, IO_POOL_CLASS, 1000, 1008),
    ],
)
def test_each_pool_s_celery_settings_and_store_connections(
    pool: str,
    concurrency: int | None,
    celery_pool: str,
    calls: int | None,
    connections: int | None,
) -> None:
    settings = Settings(pool=pool, concurrency=concurrency)
    config = celery_config(settings)
    assert config["worker_pool"] == celery_pool
    assert config.get("worker_concurrency") == calls
    assert config["task_acks_late"] and config["worker_prefetch_multiplier"] == 1
    assert store_connections(settings) == connections


def test_the_io_pool_reports_its_io_calls() -> None:
    # The truth is the calls this test started: each one says so as it begins
    # (inside `running_io_call`), and stays until released.
    release = threading.Event()
    begun: list[str] = []

    def waits(text: str) -> str:
        begun.append(text)
        release.wait(60)
        return "released"

    store = memory_store()
    agent, settings = Agent(waits), Settings(time_limit=120)
    # BasePool.info calls the private _get_info; this fails by name if that moves.
    pool = IOPool(limit=3)
    try:
        assert pool.info["max-concurrency"] == 3
        outcomes = [run_io_call(store, submitted(store, name), agent, settings) for name in "ab"]
        wait_for(lambda: len(begun) == 2, timeout=10, what="both calls to begin")
        assert pool.info["toolnexus-io-calls"] == 2
        release.set()
        wait_for(lambda: all(outcomes), timeout=30, what="both calls to end")
        assert outcomes == [[COMPLETED], [COMPLETED]]
        assert pool.info["toolnexus-io-calls"] == 0
        pool.terminate_job(None)  # a revoke's terminate: nothing to kill, no error
    finally:
        release.set()
        pool.executor.shutdown()
