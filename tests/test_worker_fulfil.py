"""The fulfilment core on its own: result mapping, claims, heartbeats, hooks."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from examples import agents
from shared.events import message_added, status_update, to_state
from shared.settings import Settings
from shared.stores.memory.store import memory_store
from shared.task import CANCELED, Task, new_task, state_of, text_message
from shared.transitions import transition
from tests.support.clock import MovableClock, wait_for_a_beat_now
from tests.support.polling import wait_for
from tests.support.recording_store import RecordingStore
from tests.support.shortcuts import with_status
from worker.engine.agent import Agent, agent_or_problem, load_agent
from worker.engine.fulfil import fulfil
from worker.engine.reaper import reap_stale

SETTINGS = Settings(heartbeat=0.05, stale_after=0.5, time_limit=7)


def submit(store: Any, text: str) -> str:
    task = new_task(text_message("user", text))
    store.save(task)
    return str(task["id"])


def status_text(task: Task) -> str:
    return str(task["status"]["message"]["parts"][0]["text"])


@pytest.fixture
def store() -> RecordingStore:
    return RecordingStore(memory_store())


def test_echo_completes_with_an_artifact_and_the_reply_in_history(store: RecordingStore) -> None:
    task_id = submit(store, "hello")

    assert fulfil(store, task_id, Agent(agents.echo), SETTINGS) == "completed"

    task = store.get(task_id)
    assert task is not None
    assert store.states(task_id) == ["submitted", "working", "completed"]
    assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "ran: hello"}]
    assert task["artifacts"][0]["artifactId"]
    reply = task["history"][-1]
    assert reply["role"] == "agent"
    assert reply["parts"] == [{"kind": "text", "text": "ran: hello"}]
    assert reply["taskId"] == task_id
    assert reply["contextId"] == task["contextId"]
    assert task["status"]["message"] == reply  # the closing words, also in the history


def test_a_plain_string_result_completes(store: RecordingStore) -> None:
    task_id = submit(store, "x")

    fulfil(store, task_id, Agent(lambda text: text.upper()), SETTINGS)

    task = store.get(task_id)
    assert task is not None
    assert state_of(task) == "completed"
    assert task["artifacts"][0]["parts"][0]["text"] == "X"


def test_an_exception_fails_the_task_with_its_message_and_no_artifacts(
    store: RecordingStore,
) -> None:
    task_id = submit(store, "boom")

    fulfil(store, task_id, Agent(agents.fail), SETTINGS)

    task = store.get(task_id)
    assert task is not None
    assert store.states(task_id) == ["submitted", "working", "failed"]
    assert task["status"]["message"]["role"] == "agent"
    assert status_text(task) == "RuntimeError: fail agent refused: boom"
    assert "artifacts" not in task


@pytest.mark.parametrize("result", [None, 42, {"answer": "no text"}, {"status": "odd", "text": 1}])
def test_an_unsupported_result_fails_saying_what_came_back(
    store: RecordingStore, result: object
) -> None:
    task_id = submit(store, "x")

    fulfil(store, task_id, Agent(lambda text: result), SETTINGS)

    task = store.get(task_id)
    assert task is not None
    assert state_of(task) == "failed"
    assert repr(result) in status_text(task)


def test_a_timeout_error_fails_saying_it_timed_out(store: RecordingStore) -> None:
    class OutOfTime(Exception):
        pass

    def too_slow(text: str) -> str:
        raise OutOfTime()

    task_id = submit(store, "x")

    fulfil(store, task_id, Agent(too_slow), SETTINGS, timeout_errors=(OutOfTime,))

    task = store.get(task_id)
    assert task is not None
    assert status_text(task) == "timed out after 7 s"


def test_pending_asks_for_input_and_a_continuation_completes(store: RecordingStore) -> None:
    agent = Agent(agents.ask_back)
    task_id = submit(store, "hi")

    assert fulfil(store, task_id, agent, SETTINGS) == "input-required"
    waiting = store.get(task_id)
    assert waiting is not None
    assert status_text(waiting) == "What is your name?"
    assert waiting["history"][-1] == waiting["status"]["message"]

    # what the front end does with a follow-up message carrying taskId
    answer = text_message("user", "Ada", taskId=task_id)
    resumed = transition(
        store, task_id, lambda t: [message_added(t, answer), status_update(t, "submitted")]
    )
    assert resumed.applied
    assert fulfil(store, task_id, agent, SETTINGS) == "completed"

    task = store.get(task_id)
    assert task is not None
    assert task["artifacts"][0]["parts"][0]["text"] == "Hello, Ada!"
    assert store.states(task_id) == [
        "submitted",
        "working",
        "input-required",
        "submitted",
        "working",
        "completed",
    ]
    assert status_text(task) == "Hello, Ada!"


def test_a_function_declaring_task_receives_the_stored_task(store: RecordingStore) -> None:
    seen: list[Task] = []

    def run(text: str, task: Task) -> str:
        seen.append(task)
        return "ok"

    task_id = submit(store, "x")
    fulfil(store, task_id, Agent(run), SETTINGS)

    assert seen[0]["id"] == task_id
    assert state_of(seen[0]) == "working"


@pytest.mark.parametrize("state", ["completed", "failed", "canceled", "working", "input-required"])
def test_a_task_not_submitted_is_not_run(store: RecordingStore, state: str) -> None:
    calls: list[str] = []
    task = with_status(new_task(text_message("user", "x")), state)
    store.save(task)

    assert fulfil(store, task["id"], Agent(calls.append), SETTINGS) == state

    assert calls == []
    assert store.states(task["id"]) == [state]


def test_an_unknown_task_is_ignored(store: RecordingStore) -> None:
    assert fulfil(store, "no-such-task", Agent(agents.echo), SETTINGS) == ""


def test_two_concurrent_deliveries_run_the_function_once(store: RecordingStore) -> None:
    calls: list[str] = []
    start = threading.Barrier(8)

    def counted(text: str) -> str:
        calls.append(text)
        time.sleep(0.05)
        return "done"

    for _ in range(20):
        task_id = submit(store, "once")
        calls.clear()

        def deliver(task_id: str = task_id) -> None:
            start.wait()
            fulfil(store, task_id, Agent(counted), SETTINGS)

        threads = [threading.Thread(target=deliver) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert calls == ["once"]
        assert store.states(task_id) == ["submitted", "working", "completed"]


def test_a_cancel_during_the_run_is_not_overwritten(store: RecordingStore) -> None:
    started, release = threading.Event(), threading.Event()
    hook_calls: list[tuple[str, str]] = []

    def blocking(text: str) -> str:
        started.set()
        release.wait(10)
        return "too late"

    task_id = submit(store, "x")
    agent = Agent(blocking, on_task=lambda i, state, task: hook_calls.append((i, state)))
    runner = threading.Thread(target=fulfil, args=(store, task_id, agent, SETTINGS))
    runner.start()
    started.wait(10)
    assert transition(store, task_id, to_state(CANCELED)).applied
    release.set()
    runner.join(10)

    task = store.get(task_id)
    assert task is not None
    assert state_of(task) == "canceled"
    assert store.states(task_id) == ["submitted", "working", "canceled"]
    assert "artifacts" not in task
    assert hook_calls == []  # the worker's write did not make the task terminal


def test_heartbeats_keep_a_long_task_from_being_reaped() -> None:
    clock = MovableClock()
    store = RecordingStore(memory_store(clock))
    release = threading.Event()

    def long_running(text: str) -> str:
        assert release.wait(120), "never released"
        return f"done: {text}"

    task_id = submit(store, "long")
    runner = threading.Thread(target=fulfil, args=(store, task_id, Agent(long_running), SETTINGS))
    runner.start()
    try:
        wait_for(lambda: state_of(store.get(task_id) or {}) == "working", what="the claim")
        # Five rounds: wait for a heartbeat stamped at the store's present
        # (the first round finds the claim's), then move the store's clock most
        # of stale_after on and reap. Four stale_afters pass in all, so the
        # task lives only if each round's heartbeat really refreshed it; and
        # the test waits for beats, never for the scheduler.
        for _ in range(5):
            wait_for_a_beat_now(store, task_id, clock)
            clock.advance(SETTINGS.stale_after * 0.8)
            assert reap_stale(store, clock(), SETTINGS.stale_after) == []
    finally:
        release.set()
        runner.join(30)
    task = store.get(task_id)
    assert task is not None
    assert state_of(task) == "completed"
    # Once it ended it left the working index: nothing to reap however late.
    assert reap_stale(store, clock() + 3600, SETTINGS.stale_after) == []


def test_a_reaped_task_stays_failed_when_its_worker_finishes_late(store: RecordingStore) -> None:
    quiet = Settings(heartbeat=5, stale_after=6)
    task_id = submit(store, "1 long")
    runner = threading.Thread(target=fulfil, args=(store, task_id, Agent(agents.slow), quiet))
    runner.start()
    wait_for(lambda: state_of(store.get(task_id) or {}) == "working")

    assert reap_stale(store, time.time() + quiet.stale_after + 0.1, quiet.stale_after) == [task_id]
    runner.join(10)
    task = store.get(task_id)
    assert task is not None
    assert status_text(task) == "worker lost: no heartbeat for 6 s"
    assert store.states(task_id) == ["submitted", "working", "failed"]


def test_on_task_is_called_once_and_its_errors_are_only_logged(
    store: RecordingStore, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[tuple[str, str]] = []

    def hook(task_id: str, state: str, task: Task) -> None:
        calls.append((task_id, state))
        raise ValueError("hook broke")

    task_id = submit(store, "x")
    assert fulfil(store, task_id, Agent(agents.echo, on_task=hook), SETTINGS) == "completed"

    assert calls == [(task_id, "completed")]
    assert "on_task hook failed" in caplog.text


def test_no_loadable_function_fails_tasks_saying_so(store: RecordingStore) -> None:
    agent = agent_or_problem(Settings(run="examples.agents:nothing_here"))
    task_id = submit(store, "x")

    fulfil(store, task_id, agent, SETTINGS)

    task = store.get(task_id)
    assert task is not None
    assert state_of(task) == "failed"
    assert status_text(task).startswith("no fulfilment function: TOOLNEXUS_RUN:")


def test_no_configured_function_fails_tasks_instead_of_hanging(store: RecordingStore) -> None:
    settings = Settings.from_env({"TOOLNEXUS_RUN": ""})
    assert settings.run is None
    task_id = submit(store, "anyone there?")

    assert fulfil(store, task_id, load_agent(settings), SETTINGS) == "failed"

    task = store.get(task_id)
    assert task is not None
    assert status_text(task) == (
        "no fulfilment function configured: set TOOLNEXUS_RUN=package.module:function"
    )
    assert store.states(task_id) == ["submitted", "working", "failed"]


def test_load_agent_loads_the_default_echo_and_the_hook() -> None:
    agent = load_agent(Settings(on_task="examples.agents:echo"))

    assert agent.run is agents.echo
    assert agent.on_task is agents.echo
    assert not agent.wants_task
    assert Agent(agents.ask_back).wants_task


def test_a_result_is_saved_once_the_store_comes_back() -> None:
    """Redis goes down while the function runs: the result waits for it
    instead of being lost to the reaper."""
    from shared.stores.redis.store import redis_store
    from tests.support.redis_server import RedisServer

    server = RedisServer(appendonly=True).start()
    try:
        store = redis_store(f"{server.url}/0", timeout=0.3)
        task_id = submit(store, "outage")
        back = threading.Event()

        def run(text: str) -> str:
            server.stop()
            threading.Timer(0.5, lambda: (server.start(), back.set())).start()
            return f"survived: {text}"

        settings = Settings(heartbeat=0.1, stale_after=20)
        assert fulfil(store, task_id, Agent(run), settings) == "completed"
        assert back.wait(10)  # the outage really happened and ended
        task = store.get(task_id)
        assert task is not None and task["artifacts"][0]["parts"][0]["text"] == "survived: outage"
    finally:
        server.close()


def test_a_result_save_gives_up_after_the_stale_threshold() -> None:
    """Past `stale_after` the reaper owns the task: the worker stops retrying."""
    from shared.errors import StoreError
    from shared.stores.redis.store import redis_store
    from tests.support.redis_server import RedisServer

    server = RedisServer().start()
    try:
        store = redis_store(f"{server.url}/0", timeout=0.2)
        task_id = submit(store, "gone")

        def run(text: str) -> str:
            server.stop()
            return "never saved"

        with pytest.raises(StoreError, match="task store unavailable"):
            fulfil(store, task_id, Agent(run), Settings(heartbeat=0.1, stale_after=1))
    finally:
        server.close()
