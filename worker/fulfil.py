"""The fulfilment core, shared by the Celery task and the in-process worker.

One delivery of a task id does this:

1. Claim it: compare-and-set `submitted` -> `working`. Only the delivery
   whose write wins runs the function. A task that is unknown, terminal
   (canceled before it started, finished by an earlier delivery), already
   `working` (a duplicate or redelivered message) or `input-required` is
   left alone. The rule is "the function runs once per submission": a
   continuation puts the task back in `submitted`, and the next claim runs
   it once more.
2. Run the function with the latest user message's text, heartbeating.
3. Save the result as a transition *from `working`*, so it loses to a cancel
   or a reaper that made the task terminal meanwhile, and never touches a
   task someone else moved on.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from shared.errors import StoreError
from shared.settings import Settings
from shared.store import TaskStore
from shared.task import (
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    SUBMITTED,
    WORKING,
    Task,
    agent_message,
    latest_user_text,
    state_of,
    text_artifact,
    with_status,
)
from shared.transitions import Outcome, transition
from worker.agent import Agent
from worker.heartbeat import heartbeating

log = logging.getLogger(__name__)

Change = Callable[[Task], Task]
_SHOWN = 200  # characters of an unsupported result quoted in the failure message


def fulfil(
    store: TaskStore,
    task_id: str,
    agent: Agent,
    settings: Settings,
    *,
    timeout_errors: tuple[type[BaseException], ...] = (),
) -> str:
    """Run one delivery of `task_id`; return the task's state afterwards ("" if unknown).

    `timeout_errors` are the exceptions that mean "out of time" (Celery's
    SoftTimeLimitExceeded); they fail the task saying it timed out.
    """
    # The claim reads the task itself: no separate load, one round trip fewer.
    claim = transition(store, task_id, lambda t: with_status(t, WORKING), from_states={SUBMITTED})
    if claim.task is None:
        log.warning("task %s: not in the store, nothing to run", task_id)
        return ""
    if not claim.applied:
        state = state_of(claim.task)
        log.info("task %s: is %s, not submitted; not running it", task_id, state)
        return state
    with heartbeating(store, task_id, settings.heartbeat):
        finish = _run(agent, claim.task, settings, timeout_errors)
        saved = _save_result(store, claim.task, finish, agent, settings)
    final = state_of(saved.task) if saved.task else ""
    if not saved.applied:
        log.info("task %s: became %s while running; result discarded", task_id, final)
    return final


def _save_result(
    store: TaskStore, running: Task, finish: Change, agent: Agent, settings: Settings
) -> Outcome:
    """Save the result as a transition from `working`, retrying through a
    short store outage: the function has run, so its result is worth waiting
    for. Heartbeats go on meanwhile; after `stale_after` the reaper would fail
    the task anyway, so that is how long this tries before giving up."""
    deadline = time.monotonic() + settings.stale_after
    delay = 0.05
    known: Task | None = running  # heartbeats do not change the stored task
    while True:
        try:
            return transition(
                store,
                running["id"],
                finish,
                from_states={WORKING},
                current=known,
                on_terminal=agent.on_task,
            )
        except StoreError as error:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("task %s: cannot save the result yet, retrying: %s", running["id"], error)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)
            known = None


def _run(
    agent: Agent,
    task: Task,
    settings: Settings,
    timeout_errors: tuple[type[BaseException], ...],
) -> Change:
    if agent.run is None:
        return failed(agent.problem)
    text = latest_user_text(task)
    try:
        extra = {"task": copy.deepcopy(task)} if agent.wants_task else {}
        result = agent.run(text, **extra)
    except timeout_errors:
        return failed(f"timed out after {settings.time_limit:g} s")
    except Exception as error:
        log.exception("task %s: fulfilment function raised", task["id"])
        return failed(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)
    return from_result(result)


def from_result(result: object) -> Change:
    """Map what the function returned to the change that saves it."""
    if isinstance(result, str):
        return completed(result)
    if isinstance(result, Mapping):
        text = result.get("text")
        if result.get("status") == "pending" and isinstance(text, str):
            return input_required(text)
        if "status" not in result and isinstance(text, str):
            return completed(text)
    shown = repr(result)
    if len(shown) > _SHOWN:
        shown = shown[: _SHOWN - 3] + "..."
    return failed(
        f"the fulfilment function returned {shown}; expected a string, {{'text': ...}}"
        " or {'status': 'pending', 'text': ...}"
    )


def completed(text: str) -> Change:
    def change(task: Task) -> Task:
        done = with_status(task, COMPLETED)
        done["history"] = [*task.get("history", []), _reply(task, text)]
        done["artifacts"] = [text_artifact(text)]
        return done

    return change


def input_required(prompt: str) -> Change:
    def change(task: Task) -> Task:
        question = _reply(task, prompt)
        waiting = with_status(task, INPUT_REQUIRED, message=question)
        waiting["history"] = [*task.get("history", []), question]
        return waiting

    return change


def failed(reason: str) -> Change:
    def change(task: Task) -> Task:
        broken = with_status(task, FAILED, message=_reply(task, reason))
        broken.pop("artifacts", None)  # a failed task carries no artifacts
        return broken

    return change


def _reply(task: Task, text: str) -> dict[str, Any]:
    ids = {"taskId": task["id"]}
    if task.get("contextId"):
        ids["contextId"] = task["contextId"]
    return agent_message(text, **ids)
