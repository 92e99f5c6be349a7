"""The task store contract.

A store is anything with `get` and `save`; nothing has to subclass
anything, so a user's Postgres or S3 store is two methods on any object.
The optional capabilities below are used when present (`isinstance` on a
runtime-checkable Protocol), and the service still answers GetTask from a
store that has none of them. Every built-in store has all of them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

from shared.errors import InvalidTaskId
from shared.events import Event, StatusUpdate
from shared.listing import Listing, Query
from shared.task import Task, TaskStatus
from shared.text import shown

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


def digest(*parts: str) -> str:
    """A fixed-length, file-name-safe key for client-chosen strings (message
    and context ids), so no client value ever becomes a key or a path."""
    joined = "\x1f".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.sha256(joined).hexdigest()


def message_key(owner: str, message_id: str) -> str:
    """The store key of a caller's message id: one task per (caller, messageId)."""
    return digest("message", owner, message_id)


@runtime_checkable
class TaskStore(Protocol):
    """The contract every store meets.

    `get` returns the saved task, or None when the id is unknown *or* the
    stored data is unreadable; it never raises for either. `save` persists
    the task under `task["id"]` and returns it; callers use the return value.
    """

    def get(self, task_id: str) -> Task | None: ...

    def save(self, task: Task) -> Task: ...


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


@runtime_checkable
class EventStore(Protocol):
    """Optional: tasks as an ordered, replayable log of events.

    - `create(task, message_key, supersedes)`: save a new `submitted` task
      (its first event is its status) unless `message_key` already names a
      task, which is then returned instead; the key is recorded in the same
      atomic step and expires with the task. With `supersedes`, a key that
      still names that task is moved to the new one (the caller moved that
      conversation on, so the same message id now starts a new one). A task
      whose `contextId` is already used by another owner raises `ContextTaken`.
    - `read(id)`: the task with its sequence numbers (`Record`).
    - `commit(commit)`: compare-and-append; True when written.
    - `events(id, after, limit)`: the logged events numbered above `after`,
      in order, at most `limit` of them (None: all). Numbers run on by one
      from event to event; where they jump, events are missing (trimmed, or
      lost by a store that numbered on from a new base), and a follower
      reads the task instead (see `shared.following`).
    - `watch(id)`: a context manager whose `wait(timeout)` returns once the
      task may have new events (or the timeout passes), in any process.
    """

    def create(
        self, task: Task, message_key: str | None = None, supersedes: str | None = None
    ) -> Created: ...

    def read(self, task_id: str) -> Record | None: ...

    def commit(self, commit: Commit) -> bool: ...

    def events(
        self, task_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Event]]: ...

    def watch(self, task_id: str) -> AbstractContextManager[Watch]: ...


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


@runtime_checkable
class ClaimingStore(Protocol):
    """Optional, for event stores: the worker's claim in one step instead of a
    read and a compare-and-append (see `shared.transitions.claim`).

    `claim(id, from_state, event)` appends the status update `event` if the
    task is in `from_state`, filling in the task's own `contextId`, and
    returns the task as it then stands, as `transition` would. None means
    the store cannot claim this task in one step (the caller then does it
    the long way).
    """

    def claim(self, task_id: str, from_state: str, event: StatusUpdate) -> Outcome | None: ...


@runtime_checkable
class ListableStore(Protocol):
    """Optional: every task, for ListTasks (read whole, see
    `shared.listing.list_by_scan`), tests and admin views."""

    def all(self) -> dict[str, Task]: ...


@runtime_checkable
class ListingStore(Protocol):
    """Optional: ListTasks answered by the store itself, reading only the page
    (see `shared.listing` for what a query means)."""

    def listing(self, query: Query) -> Listing: ...


@runtime_checkable
class AtomicStore(Protocol):
    """Optional, for stores without an event log: compare-and-set on the
    current status. Saves `task` only if the stored task with the same id
    still has `expected_status` (its state *and* timestamp, so an A-B-A
    change is noticed), and says whether it did. Without it (and without
    `EventStore`) `shared.transitions` falls back to get-check-save, which is
    only as safe as the store's own last-writer-wins."""

    def compare_and_set(self, task: Task, expected_status: TaskStatus) -> bool: ...


@runtime_checkable
class StaleIndex(Protocol):
    """Optional: a time index of `working` tasks, for the reaper.

    A task enters the index when it is saved in `working` (scored with the
    store's clock) and leaves it when it is saved in any other state.
    `heartbeat` refreshes the scores of the given tasks still in the index
    and never re-adds one that left; a process beats for all its running
    tasks in one call, so a thousand tasks cost one round trip, not a burst
    of a thousand. `stale(cutoff)` is a range query: the ids whose last
    heartbeat is older than `cutoff` (seconds since the epoch).
    """

    def heartbeat(self, *task_ids: str) -> None: ...

    def stale(self, cutoff: float) -> list[str]: ...


@runtime_checkable
class WaitingIndex(Protocol):
    """Optional: a time index of `submitted` tasks, so that work whose queue
    message was lost is found and sent again.

    A task enters the index, scored with the store's clock, whenever it is
    saved in `submitted`, and leaves it in any other state. `waiting(cutoff)`
    is a range query: the ids sent before `cutoff`; `resent(id)` re-scores a
    task still in the index with the current time (it never re-adds one).
    """

    def waiting(self, cutoff: float) -> list[str]: ...

    def resent(self, task_id: str) -> None: ...


@runtime_checkable
class InterruptedIndex(Protocol):
    """Optional: a time index of tasks waiting for the peer (`input-required`,
    `auth-required`), so that the reaper can end those left waiting.

    A task enters the index, scored with the store's clock, whenever it is
    saved in one of those states, and leaves it in any other state.
    `interrupted(cutoff)` is a range query: the ids waiting since before
    `cutoff`.
    """

    def interrupted(self, cutoff: float) -> list[str]: ...


@runtime_checkable
class MemoryLimited(Protocol):
    """Optional: a store held in memory under a limit (Redis' maxmemory).
    `memory_use()` is (bytes used, the limit), or None when there is no
    limit; `/readyz` warns when the share passes TOOLNEXUS_REDIS_MEMORY_WARN."""

    def memory_use(self) -> tuple[int, int] | None: ...


@runtime_checkable
class Expiring(Protocol):
    """Optional: a store that forgets finished tasks after a time to live by
    itself (Redis expires keys) needs nothing; one that must be swept has
    `purge_expired()`, which the reaper calls on each run: it removes every
    task past its time, with its log, its indexes and its message record,
    and returns how many it removed."""

    def purge_expired(self) -> int: ...


@runtime_checkable
class BeatRecord(Protocol):
    """Optional: where the reaper leaves the time of its last run, so every
    front end can tell whether it still runs (`/readyz`)."""

    def record_beat(self) -> None: ...

    def last_beat(self) -> float | None: ...
