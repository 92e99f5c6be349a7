"""A task a worker fails goes into the store's index of the newest failures
(`shared.failures`), on every path that fails one: the run's own end
(`worker.engine.fulfil`), its time limit (`worker.engine.io_calls`), a run
ended without an outcome (`worker.engine.retries`) and the reaper's
unanswered questions (`worker.engine.reaper`).

The store's indexes are read from its abilities once per store
(`shared.store.wiring.abilities_of`).
"""

from __future__ import annotations

import weakref
from typing import Final

from shared.failures import indexed
from shared.indexes import Indexes
from shared.store.contract import Outcome, Store
from shared.store.wiring import abilities_of
from shared.task import FAILED, state_of

_READ: Final[weakref.WeakKeyDictionary[Store, Indexes | None]] = weakref.WeakKeyDictionary()


def indexes_of(store: Store) -> Indexes | None:
    """The store's scored indexes, read once per store."""
    try:
        return _READ[store]
    except KeyError:
        found = _READ[store] = abilities_of(store).indexes
        return found
    except TypeError:  # a store that takes no weak reference: read each time
        return abilities_of(store).indexes


def index_failed(store: Store, outcome: Outcome) -> Outcome:
    """`outcome` of a write that may have failed its task: a failed task is
    put in the index of failures."""
    task = outcome.task
    if outcome.applied and task is not None and state_of(task) == FAILED:
        indexed(indexes_of(store), task)
    return outcome
