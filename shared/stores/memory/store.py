"""The default store: tasks and their logs in dicts behind one lock, private
to one process.

Each task is kept as the store's own objects: the task as it stands, folded
from its events as they are committed, and the log of those events. Folding
shares what it does not change, so a message or an artifact is kept once,
however many of the task's history, status and log entries point to it (a
1 MiB reply costs about 1 MiB, not one copy per place it appears). Nothing
the store holds is ever changed in place: what goes in is copied in (as the
JSON it will be), what comes out is a fresh copy, so no caller can touch
another's task. Waiters in this process are woken after each commit.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from shared.codec import copied
from shared.contexts import waits_for_context
from shared.errors import ContextTaken
from shared.events import Event, StatusUpdate, current_status, fold
from shared.generation import stamped
from shared.owners.book import LocalBook
from shared.push.contract import Once
from shared.store.contract import (
    LOG_LIMIT,
    Commit,
    Created,
    Outcome,
    Record,
    is_safe_id,
    require_safe_id,
)
from shared.store.features import DocumentFeatures
from shared.store.listing import Listing, Query, stamp_after, trimmed
from shared.store.ordered import OrderedIndex
from shared.store.time_indexes import TimeIndexed, TimeIndexes
from shared.store.wakeups import Notifier, Waiter
from shared.stores.memory.documents import MemoryDocuments
from shared.stores.memory.indexes import MemoryIndexes
from shared.task import (
    IN_FLIGHT,
    SUBMITTED,
    Task,
    TaskStatus,
    epoch,
    is_terminal,
    state_of,
)
from shared.transitions import SNAPSHOT_EVERY

Clock = Callable[[], float]


@dataclass
class _Entry:
    task: Task  # as it stands, never changed in place
    seq: int
    tail: int = 0  # events since the caller last asked for a whole write
    log: deque[tuple[int, Event]] = field(default_factory=deque)
    message_key: str | None = None
    expires: float | None = None
    created: bool = False  # by `create`, which counts it in its context
    # (status time, state) of each status it has had, for listings that hold still
    statuses: list[tuple[float, str]] = field(default_factory=list)


class MemoryStore(TimeIndexed, DocumentFeatures):
    documents: MemoryDocuments
    lists_by_scan = False  # ListTasks reads the page from ordered indexes

    def __init__(
        self,
        clock: Clock = time.time,
        terminal_ttl: float | None = None,
        *,
        log_limit: int = LOG_LIMIT,
    ) -> None:
        self._clock = clock
        self._ttl = terminal_ttl
        self._log_limit = log_limit
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._messages: dict[str, str] = {}  # message key -> task id
        self._contexts: dict[str, str] = {}  # context id -> owner
        self._in_context: dict[str, int] = {}  # context id -> tasks created in it, kept
        self._expiries: list[tuple[float, str]] = []  # a heap of (when, task id)
        self._beat: float | None = None
        self._notifier = Notifier()
        self._push = Once()
        self._turns = LocalBook()
        # Small documents (shared.documents), under the features that keep state.
        self.documents = MemoryDocuments(clock)
        self.indexes = MemoryIndexes()
        self._times = TimeIndexes(self.indexes, clock)
        self._order = OrderedIndex()
        # The latest moment a listing is read as of (shared.store.listing): a status
        # saved after it must not carry a timestamp at or before it.
        self._listed_as_of = 0.0

    # --- the contract ------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        record = self.read(task_id)
        return record.task if record is not None else None

    def save(self, task: Task) -> Task:
        task_id = require_safe_id(task.get("id"))
        stored = _stored(task)
        event = current_status(stored)
        with self._lock:
            entry = self._entries.get(task_id)
            if entry is None:
                entry = self._entries[task_id] = _Entry(stored, 0, log=self._new_log())
            entry.seq += 1
            entry.task, entry.tail = stored, 0
            entry.log.append((entry.seq, event))
            self._indexed(task_id, entry, state_of(task), _status_time(task))
            newest = entry.seq
        self._notifier.notify(task_id, newest)
        return task

    # --- EventStore ----------------------------------------------------------

    def create(
        self, task: Task, message_key: str | None = None, supersedes: str | None = None
    ) -> Created:
        task_id = require_safe_id(task.get("id"))
        stored = _stored(task)
        context, owner = task["contextId"], task.get("owner", "")
        with self._lock:
            status_time = self._after_listings(stored["status"])
            event = current_status(stored)
            self._expire()
            if message_key is not None and (earlier := self._messages.get(message_key)):
                entry = self._entries.get(earlier)
                if entry is not None and earlier != supersedes:
                    return Created(_copied(entry.task), False)
            if self._contexts.setdefault(context, owner) != owner:
                raise ContextTaken(f"context {context} belongs to another caller")
            self._in_context[context] = self._in_context.get(context, 0) + 1
            replaced = self._entries.get(task_id)
            if replaced is not None and replaced.created:
                self._left_context(replaced.task["contextId"])
            entry = _Entry(stored, 1, log=self._new_log(), message_key=message_key, created=True)
            entry.log.append((1, event))
            self._entries[task_id] = entry
            if message_key is not None:
                self._messages[message_key] = task_id
            self._indexed(task_id, entry, SUBMITTED, status_time)
        self._notifier.notify(task_id, 1)
        return Created(task, True)

    def read(self, task_id: str) -> Record | None:
        if not is_safe_id(task_id):
            return None
        with self._lock:
            entry = self._entries.get(task_id)
            if entry is None or self._expired(entry):
                return None
            task, seq, tail = entry.task, entry.seq, entry.tail
        return Record(_copied(task), seq, tail)

    def commit(self, commit: Commit) -> bool:
        task_id = require_safe_id(commit.task.get("id"))
        events: list[Event] = _stored(list(commit.events))
        with self._lock:
            entry = self._entries.get(task_id)
            if entry is None or entry.seq != commit.expected or self._expired(entry):
                return False
            status_time: float | None = None  # the last status's, if one changes it
            for event in events:
                if event["kind"] == "status-update":
                    status_time = self._after_listings(event["status"])
                entry.seq += 1
                entry.log.append((entry.seq, event))
            # `commit.task` is these events folded over the task the caller
            # read, which is this one: folded here, the task shares their objects.
            entry.task = fold(entry.task, events)
            entry.tail = 0 if commit.snapshot else entry.tail + len(events)
            if status_time is None:
                status_time = _status_time(entry.task)
            self._indexed(task_id, entry, state_of(entry.task), status_time)
            newest = entry.seq
        self._notifier.notify(task_id, newest)
        return True

    def events(self, task_id: str, after: int, limit: int | None = None) -> list[tuple[int, Event]]:
        with self._lock:
            entry = self._entries.get(task_id) if is_safe_id(task_id) else None
            logged = _after(entry.log, after, limit) if entry else []
        return list(zip([seq for seq, _ in logged], _copied([e for _, e in logged]), strict=True))

    def claim(self, task_id: str, from_state: str, event: StatusUpdate) -> Outcome | None:
        """`claim_by_commit` in one step under the lock: no conflict to retry,
        and the task copied once, on its way out."""
        if not is_safe_id(task_id):
            return Outcome(False, None)
        filled: StatusUpdate = _copied(event)
        with self._lock:
            entry = self._entries.get(task_id)
            if entry is None or self._expired(entry):
                return Outcome(False, None)
            task, seq, tail = entry.task, entry.seq, entry.tail
            if state_of(task) == from_state and waits_for_context(task):
                return None  # the caller's to claim (`shared.transitions.claim`)
            if state_of(task) == from_state:
                filled["contextId"] = task.get("contextId", "")
                (filled,) = stamped(task, [filled])
                status_time = self._after_listings(filled["status"])
                task, seq, tail = fold(task, [filled]), seq + 1, tail + 1
                tail = 0 if tail >= SNAPSHOT_EVERY else tail
                entry.log.append((seq, filled))
                entry.task, entry.seq, entry.tail = task, seq, tail
                self._indexed(task_id, entry, state_of(task), status_time)
                claimed = True
            else:
                claimed = False
        if claimed:
            self._notifier.notify(task_id, seq)
        return Outcome(claimed, Record(_copied(task), seq, tail))

    @contextmanager
    def watch(self, task_id: str) -> Iterator[Waiter]:
        with self._notifier.watch(task_id) as waiter:
            yield waiter

    # --- listing and the time indexes ---------------------------------------

    def all(self) -> dict[str, Task]:
        with self._lock:
            self._expire()
            ids = list(self._entries)
        tasks = {task_id: self.get(task_id) for task_id in ids}
        return {task_id: task for task_id, task in tasks.items() if task is not None}

    def listing(self, query: Query) -> Listing:
        with self._lock:
            self._listed_as_of = max(self._listed_as_of, query.as_of)
            self._expire()
            found = self._order.answer(query, self._statuses_of, self._stored_tasks)
        # Copied once the lock is let go: the page is the store's own objects.
        return Listing(_copied(found.tasks), found.total, found.last)

    def _statuses_of(self, task_id: str) -> list[tuple[float, str]]:
        """Under the lock: the task's status changes."""
        entry = self._entries.get(task_id)
        return entry.statuses if entry else []

    def _stored_tasks(self, task_ids: list[str]) -> list[Task]:
        """Under the lock: the tasks themselves, of those still here."""
        return [self._entries[i].task for i in task_ids if i in self._entries]

    def _after_listings(self, status: TaskStatus) -> float:
        """Under the lock: a status saved now, as `stamped_after` says; its
        time in seconds, which the task is indexed by."""
        stamped, seconds = stamp_after(status, self._listed_as_of)
        if stamped is not status:
            status.update(stamped)
        return seconds

    def record_beat(self) -> None:
        self._beat = self._clock()

    def last_beat(self) -> float | None:
        return self._beat

    # --- under the lock ------------------------------------------------------

    def _new_log(self) -> deque[tuple[int, Event]]:
        return deque(maxlen=self._log_limit)

    def _indexed(self, task_id: str, entry: _Entry, state: str, status_time: float) -> None:
        now = self._clock()
        if not entry.statuses or entry.statuses[-1] != (status_time, state):
            entry.statuses.append((status_time, state))
            trimmed(entry.statuses, now)
        self._times.placed(task_id, state)
        if self._ttl and is_terminal(state):
            entry.expires = now + self._ttl
            heapq.heappush(self._expiries, (entry.expires, task_id))
        task = entry.task
        self._order.place(task_id, task.get("owner", ""), task.get("contextId"), state, status_time)
        if state not in IN_FLIGHT:
            self._turns.leave(task_id)  # ended: its slot in the turn book with the write

    def _expired(self, entry: _Entry) -> bool:
        return entry.expires is not None and entry.expires <= self._clock()

    def purge_expired(self) -> int:
        self.documents.forget_expired()
        with self._lock:
            return self._expire()

    # --- the process itself ------------------------------------------------

    def memory_use(self) -> None:
        return None  # bounded by the process, not by a limit of its own

    def ping(self) -> None:
        pass  # this process's memory: always there while anyone can ask

    def close(self) -> None:
        pass

    def _accepted(self, message_key: str) -> str | None:
        """The task a message made, while it is kept."""
        task_id = self._messages.get(message_key)
        return task_id if task_id is not None and self.read(task_id) is not None else None

    def turn_book(self) -> LocalBook:
        return self._turns

    def _expire(self) -> int:
        """Forget finished tasks past their time to live, with their message
        keys, and the owner of a context once the last task created in it
        is gone (as every store does); the number forgotten."""
        forgotten = 0
        now = self._clock()
        while self._expiries and self._expiries[0][0] <= now:
            _, task_id = heapq.heappop(self._expiries)
            entry = self._entries.get(task_id)
            if entry is not None and self._expired(entry):
                del self._entries[task_id]
                self._order.remove(task_id)
                forgotten += 1
                if entry.message_key is not None:
                    self._messages.pop(entry.message_key, None)
                if entry.created:
                    self._left_context(entry.task["contextId"])
        return forgotten

    def _left_context(self, context: str) -> None:
        left = self._in_context.pop(context) - 1
        if left:
            self._in_context[context] = left
        else:
            del self._contexts[context]


def _copied(value: Any) -> Any:
    """A fresh copy of JSON-shaped `value`, shared with nothing (JSON is what
    every other store keeps, so the memory store accepts and returns the same)."""
    return copied(value)[0]


# Texts at least this long are kept once per write, however often it repeats them.
_LONG_TEXT = 1024


def _stored(value: Any) -> Any:
    """`_copied`, with equal long texts made one object: an agent's reply is
    often both a status message and an artifact, and need not cost twice.
    JSON shorter than two such texts holds no two: nothing to look for."""
    copy, length = copied(value)
    if length < 2 * _LONG_TEXT:
        return copy
    texts: dict[str, str] = {}
    pending = [copy]
    while pending:
        node = pending.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, item in items:
            if isinstance(item, str):
                if len(item) >= _LONG_TEXT:
                    node[key] = texts.setdefault(item, item)
            elif isinstance(item, dict | list):
                pending.append(item)
    return copy


def _after(log: deque[tuple[int, Event]], after: int, limit: int | None) -> list[tuple[int, Event]]:
    """The entries of `log` numbered above `after`, at most `limit`: numbers
    run on by one here, so the first is found by arithmetic, not a scan."""
    if not log:
        return []
    start = min(max(0, after + 1 - log[0][0]), len(log))
    end = len(log) if limit is None else min(len(log), start + limit)
    return [log[index] for index in range(start, end)]


def _status_time(task: Task) -> float:
    return _stamp(task["status"])


def _stamp(status: TaskStatus) -> float:
    return epoch(status.get("timestamp", ""))


def memory_store(
    clock: Clock = time.time, terminal_ttl: float | None = None, *, log_limit: int = LOG_LIMIT
) -> MemoryStore:
    return MemoryStore(clock, terminal_ttl, log_limit=log_limit)
