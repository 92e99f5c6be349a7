"""A transition that applies only while the task is still in an expected state.

`shared.transitions.transition` already refuses anything the state machine
forbids; the worker and the reaper also need "only from here": the claim
must not turn an already `working` task into `working` again (that is how a
duplicate delivery would run twice), and the reaper must not fail a task
that left `working` for `input-required` a moment after it was listed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from shared.store import TaskStore
from shared.task import Task, state_of
from shared.transitions import OnTerminal, Outcome, transition


class _Moved(Exception):
    """Raised inside the change to abort it: the task is elsewhere now."""

    def __init__(self, task: Task) -> None:
        super().__init__(task.get("id"))
        self.task = task


def transition_from(
    store: TaskStore,
    task_id: str,
    from_states: Collection[str],
    change: Callable[[Task], Task],
    *,
    on_terminal: OnTerminal | None = None,
) -> Outcome:
    """`transition`, refused (applied=False) unless the task is in `from_states`.

    The check runs on every compare-and-set attempt, against the version
    about to be replaced, so it holds even when another writer got in first.
    """

    def guarded(task: Task) -> Task:
        if state_of(task) not in from_states:
            raise _Moved(task)
        return change(task)

    try:
        return transition(store, task_id, guarded, on_terminal=on_terminal)
    except _Moved as moved:
        return Outcome(False, moved.task)
