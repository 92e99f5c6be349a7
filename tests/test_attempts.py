"""Attempts: a run without an outcome releases its task for another run while
TOOLNEXUS_MAX_ATTEMPTS allows, and a run that lost its task writes nothing more.

The store-level cases run on every store kind with the reaper's clock
injected; the agent's own `Retry` goes through `fulfil`; a pool process
killed under a real Celery worker is the end-to-end case.
"""

from __future__ import annotations

import inspect
import os
import signal
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.attempts import (
    Attempts,
    first_claim,
    holds,
    process_name,
    run_of,
    taken,
    takes_now,
)
from shared.dialects import V03, V10, V11, event_for, task_for
from shared.errors import StoreError
from shared.events import status_update, to_state
from shared.settings import Settings
from shared.store.follow import follow
from shared.stores.memory.store import memory_store
from shared.task import (
    COMPLETED,
    FAILED,
    SUBMITTED,
    WORKING,
    Task,
    new_task,
    state_of,
    text_message,
)
from shared.transitions import claim, transition
from tests.support import agents
from tests.support.agents import runs_of
from tests.support.polling import wait_for
from tests.support.store_kinds import Stores
from tests.test_worker_process import Fleet
from toolnexus import Artifact, Checkpoint, Chunk, Progress
from worker.engine.agent import Agent
from worker.engine.fulfil import fulfil
from worker.engine.reaper import reap_stale

THREE = Attempts(most=3, backoff=0.5, backoff_max=4)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Sent(list[tuple[str, float]]):
    """What a reaper or a delivery queued again, and after how long."""

    def append_call(self, task_id: str, delay: float) -> None:
        self.append((task_id, delay))


def said(task: Task | None) -> str:
    assert task is not None
    return str(task["status"]["message"]["parts"][0]["text"])


def claimed_task(store: Any) -> tuple[str, int]:
    """A task claimed as a worker claims it: its id and the claim's epoch."""
    task = new_task(text_message("user", "x"))
    store.create(task)
    outcome = claim(
        store, task["id"], to=WORKING, from_state=SUBMITTED, run=first_claim(process_name())
    )
    assert outcome.applied and outcome.record is not None
    return task["id"], run_of(outcome.record.task).epoch


def progress(store: Any, task_id: str, epoch: int, text: str) -> bool:
    """A run's write of a progress message, as `fulfil` makes it."""
    change = to_state(WORKING, text_message("agent", text))
    return transition(store, task_id, change, from_states={WORKING}, when=holds(epoch)).applied


def test_a_stale_run_s_task_is_released_taken_by_the_next_and_the_first_writes_nothing(
    store_kind: str, stores: Stores
) -> None:
    clock = Clock()
    store = stores.open(store_kind, clock=clock)
    task_id, first = claimed_task(store)
    assert progress(store, task_id, first, "step 1")
    clock.now += 100
    sent = Sent()

    failed = reap_stale(store, clock.now, 60, attempts=THREE, send_later=sent.append_call)

    assert failed == []
    released = store.get(task_id)
    assert state_of(released) == WORKING  # to its peer, still working
    assert said(released).startswith(
        "attempt 1 of 3 ended without an outcome (worker lost: no heartbeat for 60 s);"
        " attempt 2 starts in "
    )
    assert [task for task, _ in sent] == [task_id]
    assert 0.25 <= sent[0][1] <= 0.5  # the first backoff, jittered in its upper half
    assert not progress(store, task_id, first, "a late write from the lost run")

    # the next delivery takes it, and its run writes
    agent = Agent(run=lambda attempt: f"done on attempt {attempt}")
    # not before its backoff ends: a delivery until then leaves it
    assert fulfil(store, task_id, agent, SETTINGS) == WORKING
    wait_for(lambda: fulfil(store, task_id, agent, SETTINGS) == COMPLETED, what="the next attempt")

    done = store.get(task_id)
    assert said(done) == "done on attempt 2"
    texts = [said({"status": event["status"]}) for _, event in _statuses(store, task_id)]
    assert "a late write from the lost run" not in texts
    assert run_of(done or {}).epoch == first + 1


SETTINGS = Settings(heartbeat=0.05, stale_after=0.5, max_attempts=3, retry_backoff=0.05)


def _statuses(store: Any, task_id: str) -> list[tuple[int, Any]]:
    return [
        (seq, event)
        for seq, event in store.events(task_id, 0)
        if event["kind"] == "status-update" and "message" in event["status"]
    ]


def test_the_last_attempt_s_stale_run_fails_the_task_naming_the_attempts(
    store_kind: str, stores: Stores
) -> None:
    clock = Clock()
    store = stores.open(store_kind, clock=clock)
    task_id, _ = claimed_task(store)
    two = Attempts(most=2, backoff=0.1)
    sent = Sent()

    clock.now += 100
    assert reap_stale(store, clock.now, 60, attempts=two, send_later=sent.append_call) == []
    # taken by a run that dies too
    assert claim_released(store, task_id)
    clock.now += 100
    assert reap_stale(store, clock.now, 60, attempts=two, send_later=sent.append_call) == [task_id]

    task = store.get(task_id)
    assert state_of(task) == FAILED
    assert said(task) == ("worker lost: no heartbeat for 60 s (attempt 2 of 2: no attempts left)")
    assert len(sent) == 1


def claim_released(store: Any, task_id: str) -> bool:
    """A delivery taking a released task, as `fulfil` does, without running anything."""

    def take(task: Task) -> list[Any]:
        event = status_update(task, WORKING)
        event["run"] = taken("another@host")
        return [event]

    # Whenever the release said it is due: no backoff waited for here.
    anytime = takes_now(float("inf"))
    return transition(store, task_id, take, from_states={WORKING}, when=anytime).applied


def test_a_released_task_nobody_took_is_sent_again_without_counting_an_attempt(
    store_kind: str, stores: Stores
) -> None:
    clock = Clock()
    store = stores.open(store_kind, clock=clock)
    task_id, _ = claimed_task(store)
    sent = Sent()
    clock.now += 100
    reap_stale(store, clock.now, 60, attempts=THREE, send_later=sent.append_call)
    clock.now += 100  # its message was lost: no delivery took it

    assert reap_stale(store, clock.now, 60, attempts=THREE, send_later=sent.append_call) == []

    assert [delay for _, delay in sent][1:] == [0.0]
    assert run_of(store.get(task_id) or {}).attempt == 2  # still the second attempt


def test_with_one_attempt_a_stale_run_fails_as_it_always_has() -> None:
    store = memory_store()
    task_id, _ = claimed_task(store)

    assert reap_stale(store, time.time() + 100, 60) == [task_id]
    assert said(store.get(task_id)) == "worker lost: no heartbeat for 60 s"


def test_an_agent_s_retry_runs_it_again_after_the_delay_it_asked_for() -> None:
    store = memory_store()
    task = new_task(text_message("user", "retry-until 3 hello"))
    store.create(task)
    sent = Sent()
    agent = Agent(run=agents.attempted)

    for attempt in (1, 2):
        state = fulfil(store, task["id"], agent, SETTINGS, send_later=sent.append_call)
        assert state == WORKING
        assert said(store.get(task["id"])) == (
            f"attempt {attempt} of 3 ended without an outcome (the agent asked to retry:"
            f" busy on attempt {attempt}); attempt {attempt + 1} starts in 0.1 s"
        )
        # the delivery queued for when it is due takes it
        wait_for(lambda: run_of(store.get(task["id"]) or {}).due <= time.time(), what="its due")
    assert sent == [(task["id"], 0.1), (task["id"], 0.1)]
    assert fulfil(store, task["id"], agent, SETTINGS) == COMPLETED
    assert said(store.get(task["id"])) == "ran: hello on attempt 3"


def test_a_retry_with_no_attempts_left_fails_the_task_saying_why() -> None:
    store = memory_store()
    task = new_task(text_message("user", "retry-until 9 hello"))
    store.create(task)
    one = Settings(heartbeat=0.05, stale_after=0.5)

    assert fulfil(store, task["id"], Agent(run=agents.attempted), one) == FAILED
    assert said(store.get(task["id"])) == "the agent asked to retry: busy on attempt 1"


def test_no_peer_sees_the_run_record() -> None:
    store = memory_store()
    task_id, _ = claimed_task(store)
    task = store.get(task_id)
    assert task is not None and "run" in task
    events = [event for _, event in store.events(task_id, 0)]
    assert any("run" in event for event in events)
    for version in (V03, V10, V11):
        assert "run" not in task_for(version, task)
        for event in events:
            assert "run" not in str(event_for(version, event))


@pytest.fixture
def fleet(redis_url: str, tmp_path: Path) -> Any:
    fleet = Fleet(redis_url, tmp_path)
    fleet.env.update(
        TOOLNEXUS_RUN="tests.support.agents:attempted",
        TOOLNEXUS_MAX_ATTEMPTS="2",
        TOOLNEXUS_RETRY_BACKOFF="0.2",
        TOOLNEXUS_STALE_AFTER="30",  # the pool process's death is known long before
        TOOLNEXUS_HEARTBEAT="0.5",
        TOOLNEXUS_TIME_LIMIT="60",
        SCRIPTED_RUNS=str(tmp_path / "runs"),
        PYTHONPATH=str(Path(__file__).resolve().parents[1]),
    )
    yield fleet
    fleet.close()


def test_a_killed_pool_process_s_task_runs_again_on_its_next_attempt(fleet: Any) -> None:
    fleet.worker("victim")
    task_id = fleet.submit("hang-until 2 hello")
    runs = str(fleet.tmp_path / "runs")
    (pid,) = wait_for(
        lambda: runs_of(runs, "attempt 1"), timeout=60, what=f"the first attempt\n{fleet.logs()}"
    )

    os.kill(pid, signal.SIGKILL)  # the pool process, not the worker

    task = fleet.wait(task_id, "completed", timeout=60)
    assert said(task) == "ran: hello on attempt 2"
    history = [m["parts"][0]["text"] for m in task.get("history", []) if m["role"] == "agent"]
    assert any(
        text.startswith(
            "attempt 1 of 2 ended without an outcome (the worker process running it was lost)"
        )
        for text in history
    ), history


class Died(BaseException):
    """What a worker's death looks like from inside `fulfil`: nothing after it runs."""


def counting_steps(steps: int, die_at: int | None) -> Any:
    """A generator agent that publishes each step, streams a chunk of an
    artifact every fifth and saves a checkpoint after each; it dies at
    step `die_at` on its first attempt. `ran` lists every step it began."""
    ran: list[tuple[int, int]] = []

    def run(attempt: int, checkpoint: int | None) -> Iterator[Any]:
        for step in range((checkpoint or 0) + 1, steps + 1):
            ran.append((attempt, step))
            if attempt == 1 and step == die_at:
                raise Died
            yield Progress(f"step {step}")
            if step % 5 == 0:
                yield Chunk(f"[{step}]", artifact="log", last=step == steps)
            if step % 2 == 0:  # every other step: a lost run publishes past its checkpoint
                yield Checkpoint(step)
        return "all steps done"

    return run, ran


def test_a_later_attempt_goes_on_from_the_checkpoint_and_publishes_nothing_twice(
    store_kind: str, stores: Stores
) -> None:
    clock = Clock()
    store = stores.open(store_kind, clock=clock)
    task = new_task(text_message("user", "count"))
    store.create(task)
    # dies in step 26: step 25's progress and chunk were published after checkpoint 24
    run, ran = counting_steps(30, die_at=26)
    agent = Agent(run=run)

    with pytest.raises(Died):
        fulfil(store, task["id"], agent, SETTINGS)
    clock.now += 100
    reap_stale(store, clock.now, 60, attempts=THREE, send_later=Sent().append_call)
    wait_for(lambda: fulfil(store, task["id"], agent, SETTINGS) == COMPLETED, what="attempt 2")

    # the second attempt began after the last checkpoint (step 24), not before
    assert next(step for attempt, step in ran if attempt == 2) == 25
    logged = [event for _, event in store.events(task["id"], 0)]
    progress = [
        said({"status": event["status"]})
        for event in logged
        if event["kind"] == "status-update" and "message" in event["status"]
    ]
    steps = [text for text in progress if text.startswith("step ")]
    assert steps == [f"step {n}" for n in range(1, 31)]  # each once, in order
    done = store.get(task["id"])
    assert done is not None
    (log,) = [a for a in done.get("artifacts", []) if a.get("name") == "log"]
    assert "".join(part["text"] for part in log["parts"]) == "".join(
        f"[{n}]" for n in range(5, 31, 5)
    )
    # a follower never sees the checkpoints
    followed = list(follow(store, task["id"], 0, deadline=time.monotonic() + 5))
    assert all(isinstance(item, tuple) and item[1]["kind"] != "checkpoint" for item in followed)


def test_a_killed_pool_process_s_generator_goes_on_from_its_checkpoint(fleet: Any) -> None:
    fleet.env["TOOLNEXUS_RUN"] = "tests.support.agents:stepping"
    fleet.worker("victim")
    task_id = fleet.submit("60 0.05")
    runs = str(fleet.tmp_path / "runs")
    (pid,) = wait_for(
        lambda: runs_of(runs, "attempt 1 step 40"), timeout=60, what=f"step 40\n{fleet.logs()}"
    )

    os.kill(pid, signal.SIGKILL)

    task = fleet.wait(task_id, "completed", timeout=60)
    assert said(task) == "60 steps"
    lines = [line.split("\t")[0].split() for line in Path(runs).read_text().splitlines()]
    first = [int(step) for _, attempt, _, step in lines if attempt == "1"]
    second = [int(step) for _, attempt, _, step in lines if attempt == "2"]
    # killed in step k (no checkpoint k yet) or just after its checkpoint: never earlier than k
    assert second[0] in (first[-1], first[-1] + 1), lines
    assert second == list(range(second[0], 61))
    published = [
        m["parts"][0]["text"]
        for m in task.get("history", [])
        if m["parts"][0]["text"].startswith("step ")
    ]
    assert published == [f"step {n}" for n in range(1, 61)]


def test_a_stopped_worker_hands_back_what_outlives_its_drain_and_finishes_the_rest(
    fleet: Any,
) -> None:
    fleet.env["TOOLNEXUS_DRAIN_TIMEOUT"] = "1"
    leaving = fleet.worker("leaving")
    task_id = fleet.submit("hang-until 2 hello")
    runs = str(fleet.tmp_path / "runs")
    wait_for(lambda: runs_of(runs, "attempt 1"), timeout=60, what=f"attempt 1\n{fleet.logs()}")
    short = fleet.submit("plain quick")  # the worker's second process takes it
    fleet.worker("staying")
    flowing = [fleet.submit(f"plain load-{n}") for n in range(20)]  # work still coming

    leaving.send_signal(signal.SIGTERM)  # the worker's main process: a warm shutdown

    assert leaving.wait(60) == 0
    task = fleet.wait(task_id, "completed", timeout=60)
    assert said(task) == "ran: hello on attempt 2"
    history = [m["parts"][0]["text"] for m in task.get("history", []) if m["role"] == "agent"]
    assert any(
        text.startswith(
            "attempt 1 of 2 ended without an outcome (its worker shut down before it finished)"
        )
        for text in history
    ), history
    assert state_of(fleet.wait(short, "completed")) == COMPLETED
    for other in flowing:  # none failed: each ran, on one worker or the other
        assert state_of(fleet.wait(other, "completed")) == COMPLETED


def test_the_celery_internals_a_worker_hands_runs_back_with_are_where_they_were() -> None:
    """`worker/runtime/handback.py` reads these by name; a Celery that moves
    them fails here, not in a worker being drained."""
    from celery.worker import state
    from celery.worker.request import Request

    assert isinstance(state.active_requests, Iterable)
    for name in ("worker_pid", "args", "name", "cancel", "on_failure"):
        assert hasattr(Request, name), name
    assert "emit_retry" in inspect.signature(Request.cancel).parameters


def test_a_save_that_landed_though_its_reply_was_lost_is_not_written_again(
    store_kind: str, stores: Stores
) -> None:
    """Every other write of the run lands and then its caller hears a store
    error (a reply lost on the way back): each progress message, the
    artifact and the end are logged once, and the hook hears the end once."""
    store = stores.open(store_kind)
    task = new_task(text_message("user", "count"))
    store.create(task)
    heard: list[str] = []

    class LostReplies:
        def __init__(self) -> None:
            self.writes = 0

        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def commit(self, commit: Any) -> bool:
            written = bool(store.commit(commit))
            self.writes += 1
            if written and self.writes % 2 == 1:
                raise StoreError("connection reset by peer (the write had landed)")
            return written

    def steps(text: str) -> Iterator[Any]:
        for step in range(1, 5):
            yield Progress(f"step {step}")
        yield Artifact("the answer", name="answer")
        return "done"

    agent = Agent(run=steps, on_task=lambda task_id, state, task: heard.append(state))
    assert (
        fulfil(LostReplies(), task["id"], agent, Settings(heartbeat=0.05, stale_after=10))
        == COMPLETED
    )

    logged = [event for _, event in store.events(task["id"], 0)]
    said_steps = [
        said({"status": event["status"]})
        for event in logged
        if event["kind"] == "status-update" and "message" in event["status"]
    ]
    assert [text for text in said_steps if text.startswith("step ")] == [
        f"step {n}" for n in range(1, 5)
    ]
    assert [e["artifact"].get("name") for e in logged if e["kind"] == "artifact-update"] == [
        "answer",
        "result",
    ]
    assert [e["status"]["state"] for e in logged if e["kind"] == "status-update"].count(
        COMPLETED
    ) == 1
    assert heard == [COMPLETED]
