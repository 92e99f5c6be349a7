"""A user's two-method store (`get`/`save`) given the rest of the contract.

The wiring (`shared.store.wiring.open_store`) wraps such a store once, here, so
every caller uses the one interface (`shared.store.contract.Store`) and none checks
what a store can do. What the adapter gives it:

- numbered snapshots: every change is saved whole with the user's `save`;
  a task's number is made from the task itself (its status time, then how
  much history and how many artifact parts it holds), so every process
  numbers the same saved task alike without storing a number anywhere.
  Numbers are even and jump, so `events()` never looks like a contiguous
  log: it holds one status event when the task moved past `after`, and a
  follower reads the task as it stands instead (`shared.store.follow`);
- compare-and-append by reading the task again before `save`: nothing
  stops another process from saving between the two, so it is
  last-writer-wins, as the seed's contract is;
- `create` saves the task: no message-id idempotency, no context check;
- a polling watch (every `POLL` seconds, in one thread per store);
- `claim` the long way (read, check, save);
- time indexes that hold nothing (no heartbeats kept, nothing to reap or
  re-send), no listing (`Unsupported`), no record of the reaper's runs
  (`Unsupported`), no push notifications, no limiter of per-owner sends
  (so no send limit can be set with it).

`adapt(store)` logs one line at start-up naming what the store lacks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Final, cast

from shared.errors import Unsupported
from shared.events import Event, StatusUpdate, current_status
from shared.owners.book import TurnBook
from shared.push.contract import PushStore
from shared.store.contract import Commit, Created, Outcome, Record, TaskStore
from shared.store.listing import Listing, Query
from shared.store.wakeups import Notifier, Poller, Waiter
from shared.task import Task, epoch
from shared.transitions import claim_by_commit

if TYPE_CHECKING:
    from shared.owners.admission import SendLimiter

log = logging.getLogger(__name__)

# How often a watched task is read again: what a follower waits at most to
# hear of a change another process saved.
POLL: Final = 0.1
# What `ping` reads: an id no task has, so a get that answers is a store that does.
PROBE_ID: Final = "readyz-probe"

LACKS: Final = (
    "no event log (each change is saved whole; streams and waits poll the task)",
    "no messageId idempotency and no context ownership check",
    "no stale/waiting index (heartbeats are not kept; the reaper cannot find dead"
    " workers' tasks nor re-send lost messages)",
    "no listing (ListTasks answers UnsupportedOperation)",
    "no record of the reaper's runs, no TTL purge, no push notifications",
    "compare-and-append is last-writer-wins",
)

_CANNOT_LIST: Final = "this task store has only get() and save(): it cannot list its tasks"
_PER_STATUS: Final = 10_000  # numbers kept for changes within one status
_PER_CENTISECOND: Final = 2 * _PER_STATUS


def number_of(task: Task) -> int:
    """The task's number: later for a later status, and within one status for
    each message or artifact part added; always even (so never the one after
    another number, which would read as a contiguous event)."""
    try:
        at = int(epoch(task["status"]["timestamp"]) * 100)
    except (KeyError, TypeError, ValueError):
        at = 0
    grown = len(task.get("history") or ()) + sum(
        len(artifact.get("parts") or ()) for artifact in task.get("artifacts") or ()
    )
    return 2 + at * _PER_CENTISECOND + 2 * min(grown, _PER_STATUS - 1)


class Adapted:
    """`inner` (anything with `get` and `save`) with the whole contract."""

    lists_by_scan = True

    def __init__(
        self,
        inner: TaskStore,
        *,
        poll: float = POLL,
        close: Callable[[], object] | None = None,
    ) -> None:
        """`close`: the user's store's own, where it has one (read at wiring)."""
        self.inner = inner
        self._close = close
        self._notifier = Notifier()
        self._poller = Poller(self._notifier, self._stamp, every=poll, name="toolnexus-store-poll")

    # --- the seed's contract ------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        return self.inner.get(task_id)

    def save(self, task: Task) -> Task:
        saved = self.inner.save(task)
        self._notifier.notify(task["id"])
        return saved

    # --- the event log, from snapshots --------------------------------------

    def create(
        self, task: Task, message_key: str | None = None, supersedes: str | None = None
    ) -> Created:
        return Created(self.save(task), True)

    def read(self, task_id: str) -> Record | None:
        task = self.inner.get(task_id)
        return Record(task, number_of(task), 0) if task is not None else None

    def commit(self, commit: Commit) -> bool:
        stored = self.inner.get(commit.task["id"])
        if stored is not None and number_of(stored) != commit.expected:
            return False
        self.save(commit.task)
        return True

    def claim(self, task_id: str, from_state: str, event: StatusUpdate) -> Outcome | None:
        return claim_by_commit(self, task_id, from_state, event)

    def events(self, task_id: str, after: int, limit: int | None = None) -> list[tuple[int, Event]]:
        task = self.inner.get(task_id)
        if task is None or (number := number_of(task)) == after or limit == 0:
            return []
        return [(number, cast(Event, current_status(task)))]

    def watch(self, task_id: str) -> AbstractContextManager[Waiter]:
        return self._poller.watch(task_id)

    # --- what it cannot have ------------------------------------------------

    def all(self) -> dict[str, Task]:
        raise Unsupported(_CANNOT_LIST)

    def listing(self, query: Query) -> Listing:
        raise Unsupported(_CANNOT_LIST)

    def heartbeat(self, *task_ids: str) -> None:
        pass

    def stale(self, cutoff: float) -> list[str]:
        return []

    def waiting(self, cutoff: float) -> list[str]:
        return []

    def resent(self, task_id: str, after: float = 0.0) -> None:
        pass

    def interrupted(self, cutoff: float) -> list[str]:
        return []

    def purge_expired(self) -> int:
        return 0

    def record_beat(self) -> None:
        pass

    def last_beat(self) -> float | None:
        raise Unsupported("this task store keeps no record of the reaper's runs")

    def memory_use(self) -> None:
        return None

    def ping(self) -> None:
        self.inner.get(PROBE_ID)

    def close(self) -> None:
        if self._close is not None:
            self._close()

    def push_store(self, ttl: float | None = None) -> PushStore | None:
        return None

    def turn_book(self) -> TurnBook | None:
        return None

    def send_limiter(self) -> SendLimiter | None:
        return None

    # --- what the poller reads ----------------------------------------------

    def _stamp(self, task_id: str) -> int | None:
        try:
            task = self.inner.get(task_id)
        except Exception:  # the user's store: say nothing now, the next poll retries
            return None
        return number_of(task) if task is not None else 0


def adapt(store: TaskStore, *, close: Callable[[], object] | None = None) -> Adapted:
    """`store` with the whole contract; logs once what it lacks. `close`:
    the store's own, where it has one."""
    name = f"{type(store).__module__}.{type(store).__qualname__}"
    log.warning("task store %s has only get/save: %s", name, "; ".join(LACKS))
    return Adapted(store, close=close)
