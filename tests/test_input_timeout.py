"""Tasks left waiting for the peer: the reaper fails one in `input-required`
or `auth-required` past TOOLNEXUS_INPUT_TIMEOUT, through the state machine,
saying why; `toolnexus_unanswered_total` counts exactly those; and an answer
that lands at the same moment either wins or finds the task failed, never
both (docs/event-log.md, "waiting for the peer")."""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from shared import Settings
from shared.errors import InvalidTransition
from shared.stores.memory.store import memory_store
from shared.task import (
    AUTH_REQUIRED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    SUBMITTED,
    WORKING,
    Task,
    state_of,
    text_message,
)
from tests.support.store_kinds import Stores
from tests.test_bounded import DAY, a_task, store_of
from tests.test_reliability_races import round_trip
from tests.test_stores_events import Clock
from web.core.params import SendParams
from web.core.tasks import Tasks
from worker.engine.agent import Agent
from worker.engine.fulfil import fulfil
from worker.engine.metrics import worker_metrics
from worker.engine.reaper import end_unanswered, sweep


def gave_up(timeout: float) -> str:
    return f"no answer from the peer for {timeout:g} s (TOOLNEXUS_INPUT_TIMEOUT): gave up waiting"


def status_text(task: Task | None) -> str:
    assert task is not None
    part: Any = task["status"]["message"]["parts"][0]
    return str(part["text"])


def nothing_to_send(task_id: str) -> None: ...


def test_a_task_waiting_for_authorization_is_failed_after_the_timeout_saying_why(
    store_kind: str, stores: Stores
) -> None:
    clock = Clock()
    store = store_of(store_kind, clock, stores)
    timeout = 30.0
    forgotten = a_task(store, WORKING, AUTH_REQUIRED)
    clock.now += timeout - 1
    recent = a_task(store, WORKING, AUTH_REQUIRED)  # asked a second before the timeout ran out
    clock.now += 2  # the first has waited 31 s, the second 1 s
    sweep(store, nothing_to_send, clock.now, stale_after=10 * DAY, input_timeout=timeout)

    task = store.get(forgotten)
    assert state_of(task) == FAILED
    assert status_text(task) == gave_up(timeout)
    # Through the state machine: the failure is the newest event of the task's log.
    *_, (_, last) = store.events(forgotten, 0)
    assert last["kind"] == "status-update"
    assert last["status"]["state"] == FAILED
    assert last["status"]["message"]["parts"][0]["text"] == gave_up(timeout)
    assert state_of(store.get(recent)) == AUTH_REQUIRED
    # Once past its own timeout, the second goes the same way.
    clock.now += timeout
    sweep(store, nothing_to_send, clock.now, stale_after=10 * DAY, input_timeout=timeout)
    assert state_of(store.get(recent)) == FAILED
    assert status_text(store.get(recent)) == gave_up(timeout)


def counted(name: str) -> float:
    worker_metrics()  # registers the reaper's counters on first use
    return REGISTRY.get_sample_value(name) or 0.0


def test_the_unanswered_counter_counts_the_tasks_failed_for_waiting_and_no_others() -> None:
    clock = Clock()
    store = memory_store(clock)
    stale_after, timeout = 60.0, 50.0
    waiting = [
        a_task(store, WORKING, INPUT_REQUIRED),
        a_task(store, WORKING, INPUT_REQUIRED),
        a_task(store, WORKING, AUTH_REQUIRED),
    ]
    stale = a_task(store, WORKING)  # its last heartbeat: now
    clock.now += 100  # past both the stale threshold and the input timeout
    recent = a_task(store, WORKING, INPUT_REQUIRED)
    unanswered, reaped = counted("toolnexus_unanswered_total"), counted("toolnexus_reaped_total")

    assert sweep(
        store, nothing_to_send, clock.now, stale_after=stale_after, input_timeout=timeout
    ) == [stale]

    assert [state_of(store.get(i)) for i in [*waiting, stale, recent]] == [
        FAILED,
        FAILED,
        FAILED,
        FAILED,
        INPUT_REQUIRED,
    ]
    assert all(status_text(store.get(i)) == gave_up(timeout) for i in waiting)
    assert counted("toolnexus_unanswered_total") - unanswered == len(waiting)
    assert counted("toolnexus_reaped_total") - reaped == 1  # the stale one is counted there
    # A sweep that fails nothing counts nothing.
    sweep(store, nothing_to_send, clock.now, stale_after=stale_after, input_timeout=timeout)
    assert counted("toolnexus_unanswered_total") - unanswered == len(waiting)


# The race: every task waits since 0 by the stores' clock, so at NOW each is
# past TIMEOUT and the reaper fails it unless the answer got there first.
TIMEOUT = 10.0
NOW = 1000.0
ROUNDS = 200
MAX_ROUNDS = 2000


class Queued:
    """A dispatcher that notes what it was asked to queue; the test runs `fulfil` itself."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def enqueue(self, task_id: str) -> None:
        self.ids.append(task_id)

    def revoke(self, task_id: str) -> None: ...

    def check(self) -> None: ...


@pytest.fixture
def waiting_store(store_kind: str, stores: Stores) -> Any:
    return stores.open(store_kind, clock=lambda: 0.0)


@pytest.fixture
def fine_switching() -> Iterator[None]:
    """Threads switch every 10 µs instead of 5 ms, so that on the memory
    store, where nothing blocks, the two sides interleave inside their calls."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def answer_against_timeout(
    store: Any, tasks: Tasks, queued: Queued, answer_delay: float, reaper_delay: float
) -> tuple[str, list[str]]:
    """One round: a task waiting for input, its follow-up answer sent and the
    reaper's input timeout run at the same moment, each after its delay.
    Returns the outcome ("answered", "timed out", or what went wrong) and
    every broken promise seen."""
    task_id = a_task(store, WORKING, INPUT_REQUIRED)
    answer = text_message("user", "the answer", taskId=task_id)
    params = SendParams(
        message=answer, task_id=task_id, context_id=None, blocking=False, history_length=None
    )
    gate = threading.Barrier(2)
    accepted: list[Task] = []
    refused: list[str] = []
    ended: list[list[str]] = []

    # The delays only skew which side starts first, so both orders happen and
    # every interleaving in between; the outcome is read after both joined.
    def send() -> None:
        gate.wait()
        time.sleep(answer_delay)
        try:
            accepted.append(tasks.send(params, "", blocking=False).task)
        except InvalidTransition as error:
            refused.append(str(error))

    def reap() -> None:
        gate.wait()
        time.sleep(reaper_delay)
        ended.append(end_unanswered(store, NOW, TIMEOUT))

    sides = [threading.Thread(target=send), threading.Thread(target=reap)]
    for side in sides:
        side.start()
    for side in sides:
        side.join()

    task = store.get(task_id)
    history = [m.get("messageId") for m in task.get("history", [])]
    timed_out = task_id in ended[0]
    broken = []
    if accepted and timed_out:
        broken.append(f"{task_id}: the answer was accepted and the reaper failed the task: both")
    if accepted:
        outcome = "answered"
        if state_of(task) != SUBMITTED or answer["messageId"] not in history:
            broken.append(f"{task_id}: answered, yet {state_of(task)}, history {history}")
        if queued.ids.count(task_id) != 1:
            broken.append(f"{task_id}: answered, queued {queued.ids.count(task_id)} times")
        # It goes on: a worker completes it, and a later sweep leaves it alone.
        fulfil(store, task_id, Agent(run=lambda text: {"text": f"got {text}"}), Settings())
        done = store.get(task_id)
        if state_of(done) != COMPLETED or answer["messageId"] not in [
            m.get("messageId") for m in done.get("history", [])
        ]:
            broken.append(f"{task_id}: answered, then {state_of(done)} without the answer")
        if task_id in end_unanswered(store, NOW, TIMEOUT):
            broken.append(f"{task_id}: answered, then failed by a later sweep")
    elif refused:
        outcome = "timed out"
        expected = (
            f"task {task_id} is failed: only a task waiting for input accepts a follow-up message"
        )
        if refused != [expected]:
            broken.append(f"{task_id}: refused with {refused}, not {expected!r}")
        if not timed_out or state_of(task) != FAILED or status_text(task) != gave_up(TIMEOUT):
            broken.append(f"{task_id}: refused, yet {state_of(task)}: {task['status']}")
        if answer["messageId"] in history or task_id in queued.ids:
            broken.append(f"{task_id}: failed by the timeout with the answer taken in")
    else:
        outcome = "neither"
        broken.append(f"{task_id}: the answer neither accepted nor refused")
    return outcome, broken


@pytest.mark.usefixtures("fine_switching")
def test_an_answer_racing_the_timeout_either_wins_or_finds_the_task_failed(
    waiting_store: Any,
) -> None:
    store = waiting_store
    queued = Queued()
    tasks = Tasks(Settings(), store, queued)
    outcomes: Counter[str] = Counter()
    broken: list[str] = []
    # The send takes more round trips than the reaper before its write, so
    # one side, at random, starts up to a few round trips late.
    spread = max(6 * round_trip(store), 0.0005)
    rounds = 0
    while rounds < ROUNDS or (len(outcomes) < 2 and rounds < MAX_ROUNDS):
        rounds += 1
        late = random.uniform(0, spread)
        answer_delay, reaper_delay = (late, 0.0) if random.random() < 0.5 else (0.0, late)
        outcome, seen = answer_against_timeout(store, tasks, queued, answer_delay, reaper_delay)
        outcomes[outcome] += 1
        broken.extend(seen)
    print(f"\nanswer vs timeout: {rounds} rounds, {dict(outcomes)}, broken {len(broken)}")
    assert broken == [], broken[:5]
    assert set(outcomes) == {"answered", "timed out"}, f"one side never won: {outcomes}"
