"""The task store contract.

`Store` is the one interface every caller uses; every built-in store (memory,
file, SQLite, Redis and PostgreSQL, in `shared.stores`) has all of it. A user's store
may be just `get` and `save` (`TaskStore`): the wiring
(`shared.store.wiring.open_store`) wraps such a store once in
`shared.store.adapter.Adapted`, which gives it the rest and says at start-up
what it lacks. Nothing checks a capability at run time.

The push state a store keeps beside its tasks has its own contract
(`shared.push.contract`), which imports nothing from this module.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

from shared.errors import InvalidTaskId
from shared.events import Event, StatusUpdate
from shared.keys import digest
from shared.quoting import shown
from shared.store.listing import Listing, Query
from shared.task import Task

if TYPE_CHECKING:
    from shared.owners.admission import SendLimiter
    from shared.owners.book import TurnBook
    from shared.push.contract import PushStore

# One safe file name: starts with a letter or digit (so never "." or ".."),
# no separators, no NUL, bounded. Every built-in store applies it, so a
# hostile id behaves the same whichever store is configured.
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

# Events kept per task for replay (a resuming stream); older ones may be
# trimmed. Snapshots come far more often, so a read never needs a trimmed one.
LOG_LIMIT = 10_000


def is_safe_id(task_id: object) -> bool:
    return isinstance(task_id, str) and _SAFE_ID.fullmatch(task_id) is not None


def require_safe_id(task_id: object) -> str:
    if not is_safe_id(task_id):
        raise InvalidTaskId(
            f"invalid task id {shown(task_id)}: use 1-128 letters, digits, '.', '_' or '-',"
            " starting with a letter or digit"
        )
    assert isinstance(task_id, str)
    return task_id


def message_key(owner: str, message_id: str) -> str:
    """The store key of a caller's message id: one task per (caller, messageId)."""
    return digest("message", owner, message_id)


@runtime_checkable
class TaskStore(Protocol):
    """The floor: what a user's own store must have (the seed's contract).

    `get` returns the saved task, or None when the id is unknown *or* the
    stored data is unreadable; it never raises for either. `save` persists
    the task under `task["id"]` and returns it; callers use the return value.
    """

    def get(self, task_id: str) -> Task | None: ...

    def save(self, task: Task) -> Task: ...


class TaskReadsOnLoop(Protocol):
    """Tasks read from an event loop without blocking it: `read(id)` is
    `Store.read(id)` as fresh as one begun when it was awaited, or raises
    `StoreError`, after which the caller reads the blocking way (which says
    what is wrong). `close()` lets go of its connection."""

    async def read(self, task_id: str) -> Record | None: ...

    def close(self) -> None: ...


@runtime_checkable
class ReadsOnLoop(Protocol):
    """A store on the network that can read from an event loop, for a
    process that answers reads from one (decided at its wiring):
    `loop_reads()` is the reader, or None where this store's connection
    cannot be read that way."""

    def loop_reads(self) -> TaskReadsOnLoop | None: ...


class Record(NamedTuple):
    """A task as read from an event store: `seq` is the number of its last
    event (what a commit compares), `tail` how many events were appended
    since the store last wrote the whole task (when to compact)."""

    task: Task
    seq: int
    tail: int


@dataclass(frozen=True)
class Commit:
    """One atomic change: append `events` (numbered `expected + 1` on) if the
    task's last event is still `expected`. `task` is the task with the events
    applied; the store writes it whole only when `snapshot` is set, so a
    chunk of progress costs an append, not a rewrite of a growing task."""

    task: Task
    events: Sequence[Event]
    expected: int
    snapshot: bool


class Created(NamedTuple):
    """What `create` did: `created` is False when the message key was already
    taken, and `task` is then the task that message created."""

    task: Task
    created: bool


class Watch(Protocol):
    def wait(self, timeout: float, after: int | None = None) -> bool:
        """Block until the watched task may have events numbered above
        `after` (True) or `timeout` seconds pass (False); spurious wake-ups
        are allowed, missed ones are not."""

    def wake(self) -> None:
        """End the current (or next) `wait` early, from any thread."""

    def on_wake(self, callback: Callable[[], object]) -> None:
        """Also call `callback` (on the waking thread) at every wake-up from
        now on, and at once if woken since the last `wait`: how an event
        loop, which must not block in `wait`, watches."""


@dataclass(frozen=True)
class Outcome:
    """What a change did: `applied` says whether this caller's change was
    written; `record` is the task as it now stands (None: no such task)."""

    applied: bool
    record: Record | None

    @property
    def task(self) -> Task | None:
        return self.record.task if self.record is not None else None


class Store(TaskStore, Protocol):
    """The full contract: what the memory, file, Redis and PostgreSQL stores
    do, and what the adapter gives a two-method store (saying what it lacks).

    Tasks as an ordered, replayable log of events:

    - `create(task, message_key, supersedes)`: save a new `submitted` task
      (its first event is its status) unless `message_key` already names a
      task, which is then returned instead; the key is recorded in the same
      atomic step and expires with the task. With `supersedes`, a key that
      still names that task is moved to the new one (the caller moved that
      conversation on, so the same message id now starts a new one). A task
      whose `contextId` is already used by another owner raises `ContextTaken`.
    - `read(id)`: the task with its sequence numbers (`Record`).
    - `commit(commit)`: compare-and-append; True when written.
    - `claim(id, from_state, event)`: the worker's claim: append the status
      update `event` if the task is in `from_state`, filling in the task's
      own `contextId`, and return the task as it then stands, as
      `transition` would; None declines (the caller then goes the long way).
    - `events(id, after, limit)`: the logged events numbered above `after`,
      in order, at most `limit` of them (None: all). Numbers run on by one
      from event to event; where they jump, events are missing (trimmed, or
      lost by a store that numbered on from a new base), and a follower
      reads the task instead (see `shared.store.follow`).
    - `watch(id)`: a context manager whose `wait(timeout)` returns once the
      task may have new events (or the timeout passes), in any process.

    ListTasks: `listing(query)` answers a page (see `shared.store.listing`);
    `all()` is every task (tests, admin views); `lists_by_scan` says whether
    listing reads every task (the console says so). Both raise `Unsupported`
    on a store that cannot list.

    Time indexes, for the heartbeat and the reaper. A task enters the
    working index when saved in `working` (scored with the store's clock)
    and leaves it when saved in any other state; `heartbeat(*ids)` re-scores
    the given tasks still in it (never re-adding one that left), all in one
    call; `stale(cutoff)` is a range query: ids whose last heartbeat is older
    than `cutoff` (seconds since the epoch). Likewise `waiting(cutoff)` over
    `submitted` tasks (when last sent to the queue; `resent(id, after)`
    re-scores those still in it to `after` seconds from now: when the reaper
    is to count it sent) and `interrupted(cutoff)` over tasks waiting for the
    peer.

    Upkeep: `purge_expired()` removes every finished task past its time to
    live, with its log, indexes and message record (0 for a store that
    expires data by itself); `record_beat()`/`last_beat()` keep the time of
    the reaper's last run (`last_beat` raises `Unsupported` on a store that
    keeps none); `memory_use()` is (bytes used, limit), None with no limit;
    `ping()` raises `StoreError` when the store cannot take a write now, and
    names the node that took it where that can change (a Redis master that
    Sentinel moves, a PostgreSQL primary among several hosts; else None);
    `close()` lets go of connections; `push_store(ttl)` is the push state kept
    beside the tasks, one per store, or None for a store that keeps none.
    """

    lists_by_scan: bool

    def create(
        self, task: Task, message_key: str | None = None, supersedes: str | None = None
    ) -> Created: ...

    def read(self, task_id: str) -> Record | None: ...

    def commit(self, commit: Commit) -> bool: ...

    def claim(self, task_id: str, from_state: str, event: StatusUpdate) -> Outcome | None: ...

    def events(
        self, task_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Event]]: ...

    def watch(self, task_id: str) -> AbstractContextManager[Watch]: ...

    def all(self) -> dict[str, Task]: ...

    def listing(self, query: Query) -> Listing: ...

    def heartbeat(self, *task_ids: str) -> None: ...

    def stale(self, cutoff: float) -> list[str]: ...

    def waiting(self, cutoff: float) -> list[str]: ...

    def resent(self, task_id: str, after: float = 0.0) -> None: ...

    def interrupted(self, cutoff: float) -> list[str]: ...

    def purge_expired(self) -> int: ...

    def record_beat(self) -> None: ...

    def last_beat(self) -> float | None: ...

    def memory_use(self) -> tuple[int, int] | None: ...

    def ping(self) -> str | None: ...

    def close(self) -> None: ...

    def push_store(self, ttl: float | None = None) -> PushStore | None: ...

    def turn_book(self) -> TurnBook | None:
        """Its book of fair turns (`shared.owners.turns`); None: it keeps none."""

    def send_limiter(self) -> SendLimiter | None:
        """Its owners' send limits (`shared.owners.admission`), shared by every
        process on the store; None: it keeps none (no limit can be set)."""


# What a store must have to be used as it is; anything less is adapted.
CONTRACT: tuple[str, ...] = (
    "get",
    "save",
    "create",
    "read",
    "commit",
    "claim",
    "events",
    "watch",
    "all",
    "listing",
    "heartbeat",
    "stale",
    "waiting",
    "resent",
    "interrupted",
    "purge_expired",
    "record_beat",
    "last_beat",
    "memory_use",
    "ping",
    "close",
    "push_store",
)
