"""A run that ends without an outcome: the task released for another
attempt while attempts remain (`shared.attempts`), else failed.

Four things end a run that way: the reaper finding its heartbeat stale, a
worker seeing one of its pool processes die under the run, a worker
stopping with the run still going past its drain time (`hand_back`), and
the agent raising `toolnexus.Retry`. Each goes through
`end_without_outcome`, so a task is released or failed by one rule whoever
noticed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from shared.attempts import Attempts, holds, released, run_of
from shared.events import Event, status_update
from shared.failures import WORKER_LOST, Failure
from shared.store.contract import Outcome, Record, Store
from shared.task import WORKING, Task, agent_message, state_of
from shared.transitions import OnTerminal, transition
from worker.engine.failed_tasks import index_failed
from worker.engine.results import failed

log = logging.getLogger(__name__)

# Sends a task's id to the queue `delay` seconds from now (the broker's
# countdown under Celery, a timer in the embedded server).
SendLater = Callable[[str, float], None]


@dataclass(frozen=True)
class Ended:
    """What `end_without_outcome` did: `outcome` of its write, and `retry_in`
    (seconds) when it released the task, None when it failed it or wrote nothing."""

    outcome: Outcome
    retry_in: float | None


def end_without_outcome(
    store: Store,
    task_id: str,
    attempts: Attempts,
    reason: str,
    *,
    cause: str = WORKER_LOST,
    epoch: int,
    asked: float | None = None,
    current: Record | None = None,
    on_terminal: OnTerminal | None = None,
) -> Ended:
    """Release the task held at `epoch` for its next attempt (after `asked`
    seconds, else the backoff) while attempts remain, else fail it saying
    `reason` and the attempts, with `cause` (`shared.failures`). Nothing is
    written when the run at `epoch` no longer holds the task (another run
    has it, or it ended)."""
    delays: list[float] = []

    def change(task: Task) -> list[Event]:
        run = run_of(task)
        delays.clear()
        if not attempts.left_after(run):
            return list(failed(attempts.gave_up(run, reason), Failure(cause))(task))
        delay = attempts.delay(run, asked)
        delays.append(delay)
        event = status_update(task, WORKING, agent_message(attempts.said(run, reason, delay)))
        event["run"] = released(run, time.time() + delay)
        return [event]

    outcome = transition(
        store,
        task_id,
        change,
        from_states={WORKING},
        when=holds(epoch),
        current=current,
        on_terminal=on_terminal,
    )
    index_failed(store, outcome)
    return Ended(outcome, delays[0] if outcome.applied and delays else None)


def queue_again(send_later: SendLater | None, task_id: str, delay: float) -> None:
    """Queue a released task for its next attempt; should that fail, the
    reaper finds it (a released task keeps no heartbeat) and sends it."""
    if send_later is None:
        return
    try:
        send_later(task_id, delay)
    except Exception as error:
        log.warning(
            "task %s: cannot queue its next attempt now (the reaper will): %s", task_id, error
        )


def hand_back(
    store: Store,
    task_id: str,
    holder: str,
    attempts: Attempts,
    reason: str,
    *,
    send_later: SendLater | None,
    on_terminal: OnTerminal | None = None,
) -> Ended | None:
    """End the run of `holder` (a process this worker saw die, or is
    stopping) at once rather than after the stale threshold, while attempts
    remain: the task is released and queued again. Nothing is written when
    no attempt would remain (the reaper then fails it, as with one attempt)
    or when another run holds the task (the process died before its claim,
    or was not running it)."""
    record = store.read(task_id)
    if record is None or state_of(record.task) != WORKING:
        return None
    run = run_of(record.task)
    if not run.held or run.holder != holder or not attempts.left_after(run):
        return None
    return end_held_run(
        store,
        record,
        attempts,
        reason,
        cause=WORKER_LOST,
        send_later=send_later,
        on_terminal=on_terminal,
    )


def end_held_run(
    store: Store,
    record: Record,
    attempts: Attempts,
    reason: str,
    *,
    cause: str,
    send_later: SendLater | None,
    on_terminal: OnTerminal | None,
) -> Ended:
    """`end_without_outcome` for the run holding the task as `record` shows
    it, and its next attempt queued when it has one."""
    task_id = record.task["id"]
    epoch = run_of(record.task).epoch
    ended = end_without_outcome(
        store,
        task_id,
        attempts,
        reason,
        cause=cause,
        epoch=epoch,
        current=record,
        on_terminal=on_terminal,
    )
    if ended.retry_in is not None:
        queue_again(send_later, task_id, ended.retry_in)
    return ended
