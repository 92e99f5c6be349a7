"""Every change to a saved task goes through `transition`.

It reads the task, lets the caller compute the next version, checks the
state machine, and writes with the store's compare-and-set, retrying when
another writer got there first. A terminal state therefore never changes:
the state machine gives it no successor, and compare-and-set refuses to
write over a status the caller did not see.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from shared.errors import StoreError
from shared.store import AtomicStore, TaskStore
from shared.task import Task, can_transition, is_terminal, state_of

log = logging.getLogger(__name__)

# Contention on one task is a handful of writers (worker, reaper, cancel);
# running out of attempts means something is badly wrong, not busy.
_ATTEMPTS = 50

OnTerminal = Callable[[str, str, Task], Any]


@dataclass(frozen=True)
class Outcome:
    """What a transition did: `applied` says whether this caller's change was
    written; `task` is the task as it now stands (None: no such task)."""

    applied: bool
    task: Task | None


def transition(
    store: TaskStore,
    task_id: str,
    change: Callable[[Task], Task],
    *,
    from_states: Collection[str] | None = None,
    current: Task | None = None,
    on_terminal: OnTerminal | None = None,
) -> Outcome:
    """Apply `change` to the stored task if the state machine allows it.

    `change` receives a private copy of the current task and returns the
    next version (use `shared.task.with_status`). The change is refused,
    without error, when the task is unknown, when the new state may not
    follow the current one, or when `from_states` is given and the task is
    in none of them: the worker claims only `submitted` tasks (so a duplicate
    delivery never runs one twice) and the reaper fails only `working` ones.

    `current` is the version the caller believes is stored; on a store with
    compare-and-set it saves the first read, and a stale guess only costs a
    retry. `on_terminal(id,
    state, task)` runs once, in the one caller whose write made the task
    terminal; its errors are logged.
    """
    cas = store.compare_and_set if isinstance(store, AtomicStore) else None
    for _ in range(_ATTEMPTS):
        # Without compare-and-set a wrong guess would be written over, so
        # such a store is always read first.
        stored = current if current is not None and cas is not None else store.get(task_id)
        current = None
        if stored is None:
            return Outcome(False, None)
        if from_states is not None and state_of(stored) not in from_states:
            return Outcome(False, stored)
        proposed = change(copy.deepcopy(stored))
        if not can_transition(state_of(stored), state_of(proposed)):
            return Outcome(False, stored)
        if cas is None:
            saved = store.save(proposed)
        elif cas(proposed, stored["status"]):
            saved = proposed
        else:
            continue
        if on_terminal is not None and is_terminal(state_of(saved)):
            _notify(on_terminal, saved)
        return Outcome(True, saved)
    raise StoreError(f"task {task_id}: gave up after {_ATTEMPTS} conflicting writes")


def _notify(on_terminal: OnTerminal, task: Task) -> None:
    try:
        on_terminal(task["id"], state_of(task), copy.deepcopy(task))
    except Exception:
        log.exception("on_task hook failed for task %s", task.get("id"))
