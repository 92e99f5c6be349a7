"""Every change to a saved task goes through `transition`.

It reads the task, lets the caller compute the events of the change, checks
the state machine, and appends them with the store's compare-and-append,
retrying when another writer got there first. A terminal state therefore
never changes: the state machine gives it no successor, and the store
refuses to append after an event the caller did not see.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Collection
from typing import Any, cast

from shared.contexts import waits_for_context
from shared.errors import StoreError
from shared.events import Change, StatusUpdate, fold, status_update
from shared.generation import stamped
from shared.store.contract import Commit, Outcome, Record, Store
from shared.task import Task, can_transition, is_at_rest, is_terminal, state_of

log = logging.getLogger(__name__)

# Contention on one task is a handful of writers (worker, reaper, cancel);
# running out of attempts means something is badly wrong, not busy.
_ATTEMPTS = 50
# A store writes the whole task once this many events have been appended
# since it last did; in between a change costs only its events. A task that
# comes to rest (terminal, or waiting for its caller) is written whole too:
# it is read far more often than it changes from then on.
SNAPSHOT_EVERY = 32

OnTerminal = Callable[[str, str, Task], Any]


def transition(
    store: Store,
    task_id: str,
    change: Change,
    *,
    from_states: Collection[str] | None = None,
    current: Record | None = None,
    on_terminal: OnTerminal | None = None,
    when: Callable[[Task], bool] | None = None,
) -> Outcome:
    """Apply `change` to the stored task if the state machine allows it.

    `change` receives the current task (it must not modify it) and returns
    the events to append (see `shared.events`). The change is refused,
    without error, when the task is unknown, when it returns no events, when
    a new state may not follow the one before it, or when `from_states` is
    given and the task is in none of them: the worker claims only
    `submitted` tasks (so a duplicate delivery never runs one twice) and the
    reaper fails only `working` ones; likewise when `when(task)` is false (a
    run writes only while it holds the task: `shared.attempts.holds`).

    `current` is the version the caller believes is stored (the record of
    its last transition); on an event store it saves the first read, and a
    stale guess only costs a retry. `on_terminal(id, state, task)` runs once,
    in the one caller whose write made the task terminal; its errors are logged.
    """
    for _ in range(_ATTEMPTS):
        record = current if current is not None else store.read(task_id)
        current = None
        if record is None:
            return Outcome(False, None)
        task = record.task
        if from_states is not None and state_of(task) not in from_states:
            return Outcome(False, record)
        if when is not None and not when(task):
            return Outcome(False, record)
        events = change(task)
        if not events or not _allowed(state_of(task), events):
            return Outcome(False, record)
        events = stamped(task, events)
        proposed = fold(task, events)
        tail = record.tail + len(events)
        snapshot = tail >= SNAPSHOT_EVERY or is_at_rest(state_of(proposed))
        if not store.commit(Commit(proposed, events, record.seq, snapshot)):
            continue
        saved = Record(proposed, record.seq + len(events), 0 if snapshot else tail)
        if on_terminal is not None and is_terminal(state_of(proposed)):
            notify(on_terminal, proposed)
        return Outcome(True, saved)
    raise StoreError(f"task {task_id}: gave up after {_ATTEMPTS} conflicting writes")


def claim(
    store: Store,
    task_id: str,
    *,
    to: str,
    from_state: str,
    run: dict[str, Any] | None = None,
    waiting: bool = False,
) -> Outcome:
    """`transition(store, task_id, to_state(to), from_states={from_state})`,
    through the store's own `claim` (one round trip on Redis): the worker's
    claim of every task. `run`: what the claim sets in the task's run
    record (`shared.attempts`). A task that waits for its context
    (`shared.contexts`) is left as it is (the store's claim leaves it to
    this one), unless `waiting`: its context was seen free.

    Only a move the state machine allows to a state that is not at rest
    goes through `claim`: one to a state at rest is written whole, may
    expire and runs the `on_task` hook, which only `transition` does."""

    def claimed(task: Task) -> StatusUpdate:
        event = status_update(task, to)
        if run is not None:
            event["run"] = run
        return event

    # A waiting task's store claim would hand it back again: read and written here.
    if not waiting and can_transition(from_state, to) and not is_at_rest(to):
        # The store fills in the task's contextId; the rest of the event is made here.
        event = claimed(cast(Task, {"id": task_id, "contextId": ""}))
        outcome = store.claim(task_id, from_state, event)
        if outcome is not None:
            return outcome
    return transition(
        store,
        task_id,
        lambda task: [claimed(task)],
        from_states={from_state},
        when=None if waiting else _not_waiting,
    )


def _not_waiting(task: Task) -> bool:
    return not waits_for_context(task)


def claim_by_commit(
    store: Store, task_id: str, from_state: str, event: StatusUpdate
) -> Outcome | None:
    """`Store.claim` for a store whose compare-and-append is its one atomic
    step (memory, file, the adapter): read, check the state, append `event`
    with the task's own contextId, again on a conflict."""
    for _ in range(_ATTEMPTS):
        record = store.read(task_id)
        if record is None:
            return Outcome(False, None)
        if state_of(record.task) != from_state:
            return Outcome(False, record)
        if waits_for_context(record.task):
            return None
        filled = cast(StatusUpdate, {**event, "contextId": record.task.get("contextId", "")})
        (filled,) = stamped(record.task, [filled])
        proposed = fold(record.task, [filled])
        tail = record.tail + 1
        snapshot = tail >= SNAPSHOT_EVERY
        if store.commit(Commit(proposed, [filled], record.seq, snapshot)):
            return Outcome(True, Record(proposed, record.seq + 1, 0 if snapshot else tail))
    raise StoreError(f"task {task_id}: gave up after {_ATTEMPTS} conflicting writes")


def _allowed(state: str, events: Collection[Any]) -> bool:
    """Nothing follows a terminal state, and each status change in `events`
    may follow the state before it."""
    if is_terminal(state):
        return False
    for event in events:
        if event["kind"] == "status-update":
            new = event["status"]["state"]
            if not can_transition(state, new):
                return False
            state = new
    return True


def notify(on_terminal: OnTerminal, task: Task) -> None:
    """Run the on_task hook for a task that just became terminal; its errors are logged."""
    try:
        on_terminal(task["id"], state_of(task), copy.deepcopy(task))
    except Exception:
        log.exception("on_task hook failed for task %s", task.get("id"))
