"""The time indexes the heartbeat and the reaper read, written once over a
store's scored indexes (`shared.indexes`): which index a task is in follows
from its state alone, and is decided here.

- `working`: tasks in `working`, scored by their last heartbeat;
- `waiting`: tasks in `submitted`, scored by when last sent to the queue;
- `interrupted`: tasks waiting for the peer (`input-required`,
  `auth-required`), scored by since when.

A store calls `placed(task, state)` with each write (the task enters the
index of its new state at the store's time and leaves the others);
`heartbeat` and `resent` re-score tasks still in their index, never
bringing back one that left; `due(name, cutoff)` is the range query: the
tasks whose score is older than `cutoff`. A store that writes a task and its
place in one step of its own (the SQL stores' transaction, the Redis store's
script) asks `scores(state)` or `index_of(state)` and writes what they say.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Final

from shared.indexes import Indexes
from shared.task import INTERRUPTED_STATES, SUBMITTED, WORKING

WORKING_INDEX: Final = "working"
WAITING_INDEX: Final = "waiting"
INTERRUPTED_INDEX: Final = "interrupted"
# Each index and the states whose tasks it holds.
STATES: Final[dict[str, frozenset[str]]] = {
    WORKING_INDEX: frozenset({WORKING}),
    WAITING_INDEX: frozenset({SUBMITTED}),
    INTERRUPTED_INDEX: frozenset(INTERRUPTED_STATES),
}


def index_of(state: str) -> str | None:
    """The time index a task in `state` is in; None for a task in none."""
    return next((name for name, states in STATES.items() if state in states), None)


class TimeIndexes:
    def __init__(self, indexes: Indexes, clock: Callable[[], float] = time.time) -> None:
        self._indexes = indexes
        self._clock = clock

    def placed(self, task_id: str, state: str) -> None:
        """The task, now in `state`, in the index of that state (scored now)
        and out of the others, in one step."""
        self._indexes.place(task_id, self.scores(state))

    def scores(self, state: str) -> dict[str, float | None]:
        """Where a task now in `state` belongs: its index scored now, None
        for the others (what `placed` writes, for a store that writes it with
        the task, in the same transaction)."""
        now, entered = self._clock(), index_of(state)
        return {name: now if name == entered else None for name in STATES}

    def heartbeat(self, *task_ids: str) -> None:
        self._indexes.rescore(WORKING_INDEX, task_ids, self._clock())

    def resent(self, task_id: str, after: float = 0.0) -> None:
        self._indexes.rescore(WAITING_INDEX, [task_id], self._clock() + after)

    def due(self, name: str, cutoff: float) -> list[str]:
        """The tasks in index `name` scored before `cutoff`, oldest first."""
        found = self._indexes.range(name, upto=math.nextafter(cutoff, -math.inf))
        return [task_id for task_id, _ in found]

    def score(self, name: str, task_id: str) -> float | None:
        """The task's score in index `name`; None where it is not in it."""
        return self._indexes.score(name, task_id)

    def forget(self, task_id: str) -> None:
        """The task out of every time index (it is gone)."""
        self._indexes.place(task_id, dict.fromkeys(STATES))


class TimeIndexed:
    """The store methods of the time indexes (`heartbeat`, `stale`,
    `waiting`, `resent`, `interrupted`), for a store that keeps them as
    `TimeIndexes` in `_times`."""

    _times: TimeIndexes

    def heartbeat(self, *task_ids: str) -> None:
        self._times.heartbeat(*task_ids)

    def stale(self, cutoff: float) -> list[str]:
        return self._times.due(WORKING_INDEX, cutoff)

    def waiting(self, cutoff: float) -> list[str]:
        return self._times.due(WAITING_INDEX, cutoff)

    def resent(self, task_id: str, after: float = 0.0) -> None:
        self._times.resent(task_id, after)

    def interrupted(self, cutoff: float) -> list[str]:
        return self._times.due(INTERRUPTED_INDEX, cutoff)
