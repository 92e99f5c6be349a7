"""A run that ends without an outcome: the task released for another
attempt while attempts remain (`shared.attempts`), else failed.

Three things end a run that way: the reaper finding its heartbeat stale, a
delivery finding that the worker process running it before was lost (a
redelivered message), and the agent raising `toolnexus.Retry`. Each goes
through `end_without_outcome`, so a task is released or failed by one rule
whoever noticed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shared.attempts import Attempts, holds, released, run_of
from shared.events import Event, status_update
from shared.store.contract import Outcome, Record, Store
from shared.task import WORKING, Task, agent_message
from shared.transitions import OnTerminal, transition
from worker.engine.results import failed

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
    epoch: int,
    asked: float | None = None,
    current: Record | None = None,
    on_terminal: OnTerminal | None = None,
) -> Ended:
    """Release the task held at `epoch` for its next attempt (after `asked`
    seconds, else the backoff) while attempts remain, else fail it saying
    `reason` and the attempts. Nothing is written when the run at `epoch`
    no longer holds the task (another run has it, or it ended)."""
    delays: list[float] = []

    def change(task: Task) -> list[Event]:
        run = run_of(task)
        delays.clear()
        if not attempts.left_after(run):
            return list(failed(attempts.gave_up(run, reason))(task))
        delay = attempts.delay(run, asked)
        delays.append(delay)
        event = status_update(task, WORKING, agent_message(attempts.said(run, reason, delay)))
        event["run"] = released(run)
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
    return Ended(outcome, delays[0] if outcome.applied and delays else None)
