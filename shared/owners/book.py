"""The turn book: what a store keeps for fair turns (`shared.owners.turns`),
its contract, and its algorithm over plain data, kept in this process
(`LocalBook`, the memory store's) or as one small document of the store's
(`DocumentBook`, the SQLite, file and PostgreSQL stores')."""

from __future__ import annotations

import heapq
import json
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

import orjson

from shared.documents import Documents, step

log = logging.getLogger(__name__)

# The window with no live worker registered.
FLOOR: Final = 1

T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    """A task to hold for its turn, with its owner's terms as they stand."""

    task_id: str
    owner: str
    priority: int = 0
    weight: float = 1.0
    max_running: int | None = None


@dataclass(frozen=True)
class OwnerCount:
    held: int = 0
    in_flight: int = 0


@dataclass(frozen=True)
class BookView:
    """What the book holds, for metrics, the console and Flower."""

    owners: Mapping[str, OwnerCount]
    oldest_held: float | None  # when the longest-held task was held (epoch seconds)
    capacity: int  # the live workers' slots

    @property
    def held(self) -> int:
        return sum(count.held for count in self.owners.values())


# Publishes the tasks a step of the book took (hands them to the broker).
Publish = Callable[[list[str]], object]

# At most this many steps' results wait for their `hold_and_take`: each is
# asked for right after the create that kept it, so more means some never were.
MOST_KEPT: Final = 1024


class TakenByCreates:
    """What the step of a store's `create_held` took, by the task it held,
    kept for that task's `hold_and_take`, which follows at once (and then
    asks nothing more of the store). Should that never come (the send failed
    in between), the task is held all the same, and the ids taken stay in
    flight for beat's resend, as after a crash between two steps."""

    def __init__(self) -> None:
        self._taken: dict[str, list[str]] = {}

    def keep(self, task_id: str, taken: list[str]) -> None:
        if len(self._taken) >= MOST_KEPT:
            self._taken.clear()  # never claimed: forgotten, as above
        self._taken[task_id] = taken

    def claim(self, entries: list[Entry]) -> list[str] | None:
        """What the create of this one entry's task took, once; else None."""
        if len(entries) != 1 or not self._taken:
            return None
        return self._taken.pop(entries[0].task_id, None)


# `release_on_commit(fair, publish)`: from now on this process's writes that
# take a task out of flight also release it from the book, in the same round
# trip, and what that step takes is published (a book that can: Redis's).
ReleaseOnCommit = Callable[[bool, Publish], None]


class TurnBook(Protocol):
    """A store's turn book; each method is one atomic step."""

    def hold_and_take(self, entries: list[Entry], fair: bool) -> list[str]:
        """Hold each task (not again if it is held or in flight), then take
        every task whose turn has come into flight; their ids, in order."""

    def release_and_take(self, task_ids: list[str], fair: bool) -> list[str]:
        """Take the tasks out of flight and out of the book (finished, or
        their delivery ended), then take what has room now."""

    def held_among(self, task_ids: list[str]) -> tuple[set[str], set[str]]:
        """Which of `task_ids` are held, and which in flight."""

    def in_flight(self) -> list[str]:
        """Every task id in flight."""

    def register(self, worker: str, slots: int, ttl: float) -> None:
        """A live worker's slots, for `ttl` seconds (registered again before then)."""

    def unregister(self, worker: str) -> None: ...

    def lapsed(self) -> list[str]:
        """Drop the slots of workers whose registration lapsed (not registered
        again within its `ttl`); those workers."""

    def view(self) -> BookView: ...


class TurnState:
    """The turn book's algorithm over plain data, for a store that keeps the
    book in this process (memory) or in one locked file (file)."""

    def __init__(self) -> None:
        self.seq = 0
        self.vtime = 0.0
        self.held: dict[str, list[tuple[int, int, str]]] = {}  # owner -> heap
        self.where: dict[str, str] = {}  # held task -> owner
        self.held_at: dict[str, float] = {}
        self.passes: dict[str, float] = {}  # owners with held tasks -> pass
        self.terms: dict[str, tuple[float, int | None]] = {}  # owner -> weight, cap
        self.flight: dict[str, str] = {}  # task in flight -> owner
        self.running: dict[str, int] = {}  # owner -> tasks in flight
        self.workers: dict[str, tuple[int, float]] = {}  # worker -> slots, expiry

    def to_json(self) -> dict[str, Any]:
        """The whole state as JSON values, for a book kept in one file or row."""
        return {
            "seq": self.seq,
            "vtime": self.vtime,
            "held": self.held,
            "held_at": self.held_at,
            "passes": self.passes,
            "terms": self.terms,
            "flight": self.flight,
            "workers": self.workers,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TurnState:
        state = cls()
        state.seq = int(data.get("seq", 0))
        state.vtime = float(data.get("vtime", 0.0))
        state.held = {
            owner: [(int(rank), int(number), str(task)) for rank, number, task in line]
            for owner, line in data.get("held", {}).items()
        }
        state.where = {task: owner for owner, line in state.held.items() for _, _, task in line}
        state.held_at = {task: float(at) for task, at in data.get("held_at", {}).items()}
        state.passes = {owner: float(value) for owner, value in data.get("passes", {}).items()}
        state.terms = {
            owner: (float(weight), None if cap is None else int(cap))
            for owner, (weight, cap) in data.get("terms", {}).items()
        }
        state.flight = {task: str(owner) for task, owner in data.get("flight", {}).items()}
        for owner in state.flight.values():
            state.running[owner] = state.running.get(owner, 0) + 1
        state.workers = {
            worker: (int(count), float(expiry))
            for worker, (count, expiry) in data.get("workers", {}).items()
        }
        return state

    # --- the steps -----------------------------------------------------------

    def hold_and_take(self, entries: list[Entry], fair: bool, now: float) -> list[str]:
        for entry in entries:
            self._hold(entry, now)
        return self._take(fair, now)

    def release_and_take(self, task_ids: list[str], fair: bool, now: float) -> list[str]:
        for task_id in task_ids:
            self._release(task_id)
        return self._take(fair, now)

    def leave(self, task_id: str) -> None:
        """The task out of the book (it ended): room is made, nothing taken."""
        self._release(task_id)

    def held_among(self, task_ids: list[str]) -> tuple[set[str], set[str]]:
        held = {task_id for task_id in task_ids if task_id in self.where}
        flying = {task_id for task_id in task_ids if task_id in self.flight}
        return held, flying

    def in_flight(self) -> list[str]:
        return list(self.flight)

    def register(self, worker: str, slots: int, ttl: float, now: float) -> None:
        self.workers[worker] = (slots, now + ttl)

    def unregister(self, worker: str) -> None:
        self.workers.pop(worker, None)

    def lapsed(self, now: float) -> list[str]:
        gone = [worker for worker, (_, expiry) in self.workers.items() if expiry <= now]
        for worker in gone:
            del self.workers[worker]
        return gone

    def view(self, now: float) -> BookView:
        owners = {
            owner: OwnerCount(len(self.held.get(owner, ())), self.running.get(owner, 0))
            for owner in {*self.held, *self.running}
        }
        oldest = min(self.held_at.values(), default=None)
        return BookView(owners, oldest, self._capacity(now)[0])

    # --- internals -----------------------------------------------------------

    def _hold(self, entry: Entry, now: float) -> None:
        task_id, owner = entry.task_id, entry.owner
        if task_id in self.where or task_id in self.flight:
            return
        self.seq += 1
        self.terms[owner] = (entry.weight, entry.max_running)
        line = self.held.setdefault(owner, [])
        heapq.heappush(line, (-entry.priority, self.seq, task_id))
        self.where[task_id] = owner
        self.held_at[task_id] = now
        if owner not in self.passes:
            self.passes[owner] = self.vtime

    def _release(self, task_id: str) -> None:
        owner = self.flight.pop(task_id, None)
        if owner is not None:
            left = self.running.get(owner, 1) - 1
            if left > 0:
                self.running[owner] = left
            else:
                self.running.pop(owner, None)
        owner = self.where.pop(task_id, None)
        if owner is not None:  # finished while held (a cancel): out of its line
            self.held_at.pop(task_id, None)
            line = [item for item in self.held.get(owner, []) if item[2] != task_id]
            heapq.heapify(line)
            if line:
                self.held[owner] = line
            else:
                self.held.pop(owner, None)
                self.passes.pop(owner, None)

    def _capacity(self, now: float) -> tuple[int, int]:
        """The live workers' slots, and how many live workers. (A lapsed
        registration is dropped, and counted, by beat's sweep: `lapsed`.)"""
        slots = live = 0
        for room, expiry in self.workers.values():
            if expiry > now:
                slots += room
                live += 1
        return slots, live

    def _window(self, now: float) -> int:
        slots, workers = self._capacity(now)
        return slots + workers if workers else FLOOR

    def _take(self, fair: bool, now: float) -> list[str]:
        room = self._window(now) - len(self.flight)
        taken: list[str] = []
        while room > 0:
            owner = self._next_owner(fair)
            if owner is None:
                break
            line = self.held[owner]
            _, _, task_id = heapq.heappop(line)
            del self.where[task_id]
            self.held_at.pop(task_id, None)
            self.flight[task_id] = owner
            self.running[owner] = self.running.get(owner, 0) + 1
            weight, _ = self.terms.get(owner, (1.0, None))
            self.vtime = self.passes[owner]
            self.passes[owner] += 1.0 / weight
            if not line:
                del self.held[owner]
                del self.passes[owner]
            taken.append(task_id)
            room -= 1
        return taken

    def _next_owner(self, fair: bool) -> str | None:
        best: tuple[float, int, str] | None = None
        for owner, line in self.held.items():
            _, cap = self.terms.get(owner, (1.0, None))
            if cap is not None and self.running.get(owner, 0) >= cap:
                continue
            first_seq = line[0][1]
            key = (self.passes[owner] if fair else 0.0, first_seq, owner)
            if best is None or key < best:
                best = key
        return best[2] if best is not None else None


class SteppedBook(ABC):
    """A book kept whole as one `TurnState`: each step applies the algorithm
    to it under one lock (a thread's, a file's, a row's) and keeps the
    result; a read looks at it as it stands."""

    @abstractmethod
    def _step(self, step: Callable[[TurnState, float], T]) -> T:
        """`step(state, now)` applied under the lock, the state then kept."""

    @abstractmethod
    def _read(self, read: Callable[[TurnState, float], T]) -> T:
        """`read(state, now)` on the book as it stands."""

    def hold_and_take(self, entries: list[Entry], fair: bool) -> list[str]:
        return self._step(lambda state, now: state.hold_and_take(entries, fair, now))

    def release_and_take(self, task_ids: list[str], fair: bool) -> list[str]:
        return self._step(lambda state, now: state.release_and_take(task_ids, fair, now))

    def register(self, worker: str, slots: int, ttl: float) -> None:
        self._step(lambda state, now: state.register(worker, slots, ttl, now))

    def unregister(self, worker: str) -> None:
        self._step(lambda state, now: state.unregister(worker))

    def lapsed(self) -> list[str]:
        return self._step(lambda state, now: state.lapsed(now))

    def leave(self, task_id: str) -> None:
        """For the store's own write that ended the task: out of the book at
        once (held or in flight), whoever wrote the end."""
        self._step(lambda state, now: state.leave(task_id))

    def held_among(self, task_ids: list[str]) -> tuple[set[str], set[str]]:
        if not task_ids:
            return set(), set()
        return self._read(lambda state, _: state.held_among(task_ids))

    def in_flight(self) -> list[str]:
        return self._read(lambda state, _: state.in_flight())

    def view(self) -> BookView:
        return self._read(lambda state, now: state.view(now))


class LocalBook(SteppedBook):
    """A turn book in this process's memory (the memory store's)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.state = TurnState()
        self.clock = clock
        self._lock = threading.Lock()

    def _step(self, step: Callable[[TurnState, float], T]) -> T:
        with self._lock:
            return step(self.state, self.clock())

    def _read(self, read: Callable[[TurnState, float], T]) -> T:
        # In memory the book as it stands is the one steps change: read under the lock too.
        return self._step(read)


class DocumentBook(SteppedBook):
    """A turn book kept as one small document of the store's
    (`shared.documents`), `turn-book`: each step reads it with the store's
    clock, applies itself here and writes it back only if no other step
    came between (else again, from the book as it then stands); a step that
    changes nothing writes nothing. No lock is held across a step, so a
    process that vanishes mid-step leaves nothing behind. A book that
    cannot be read (edited by hand, cut by a power cut) starts again empty,
    with a warning: beat's resend holds again every submitted task that is
    neither held nor in flight (see `shared.owners.turns`). A store's write
    that ends a task takes it out of flight inside its own transaction
    (the SQL stores: the book over the documents of that transaction)."""

    NAME: Final = "turn-book"

    def __init__(self, documents: Documents) -> None:
        self._documents = documents
        self.creates = TakenByCreates()

    def hold_and_take(self, entries: list[Entry], fair: bool) -> list[str]:
        taken = self.creates.claim(entries)
        return super().hold_and_take(entries, fair) if taken is None else taken

    def _step(self, apply: Callable[[TurnState, float], T]) -> T:
        def change(stored: Any, now: float) -> tuple[Any, float | None, T]:
            state = _state(stored)
            result = apply(state, now)
            data = state.to_json()
            return (stored if _same(data, stored) else data), None, result

        return step(self._documents, self.NAME, change)

    def _read(self, read: Callable[[TurnState, float], T]) -> T:
        found = self._documents.document(self.NAME)
        return read(_state(found.value), found.now)


_EMPTY: Final = TurnState().to_json()


def _state(stored: Any) -> TurnState:
    if stored is None:
        return TurnState()
    try:
        if not isinstance(stored, Mapping):
            raise ValueError("not a JSON object")
        return TurnState.from_json(stored)
    except (ValueError, TypeError, AttributeError) as error:
        log.warning("task store: the turn book is unreadable (%s): started afresh", error)
        return TurnState()


def _same(data: dict[str, Any], stored: Any) -> bool:
    """Whether the book as JSON is the one stored (tuples and lists alike;
    no book stored is the empty one)."""
    return _text(data) == _text(_EMPTY if stored is None else stored)


def _text(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a value orjson refuses (an integer past 64 bits, written by hand)
        return json.dumps(value, sort_keys=True).encode()
