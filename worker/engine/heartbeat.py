"""Keep running tasks' entries in the store's working index fresh.

One thread per process beats for every task running in it: a thread, not a
signal, so the beat goes on while a fulfilment function blocks in C code or
I/O; it dies with the process, which is the point: a worker that is gone
stops beating and the reaper notices. One for all, not one per task, so a
task costs a registration rather than a thread start and join.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import threading
import time
from collections import deque
from contextlib import AbstractContextManager
from types import TracebackType

from shared.errors import StoreError
from shared.store.contract import Store

log = logging.getLogger(__name__)

# How early, as a share of its interval, a task's beat may come when
# another's wakes the thread.
EARLY_SHARE = 0.25


def heartbeating(store: Store, task_id: str, every: float) -> AbstractContextManager[None]:
    """Beat for `task_id` in `store` every `every` seconds until the block
    ends (a store without a stale index takes the beats and keeps nothing)."""
    return _Beating(store, task_id, every)


class _Beating:
    """The block of one task: registered on entry, forgotten on exit."""

    __slots__ = ("_beats", "_every", "_store", "_task_id", "_token")

    def __init__(self, store: Store, task_id: str, every: float) -> None:
        self._store = store
        self._task_id = task_id
        self._every = every
        self._token = -1

    def __enter__(self) -> None:
        self._beats = _process_beats()
        self._token = self._beats.add(self._store, self._task_id, self._every)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._beats.remove(self._token)  # the registry it was added to


class _Beats:
    """The tasks this process runs, each due for its next beat at a time.

    A task's registration and its end take no lock (every task runs one,
    and under gevent a lock is Python code): each is one dict operation and
    one deque append, atomic under the GIL. The tasks beaten every so many
    seconds wait in one queue, in the order they fall due: their next beat
    is the time they were put there plus the same interval, so appending
    keeps the order and the earliest is always the first. The thread is
    woken (under its condition) only for a beat earlier than the one it
    sleeps until: the first task of a process, or a shorter interval. With
    no task running, it looks again an interval later (once, not per task).
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running: dict[int, tuple[Store, str]] = {}
        # Per interval, (due, token) in the order they fall due; entries of
        # ended tasks are skipped.
        self._queues: dict[float, deque[tuple[float, int]]] = {}
        # When the thread wakes next of itself; 0 while it is not asleep, so
        # a task added meanwhile always wakes it (it is then looking).
        self._wake_at = 0.0
        self._tokens = itertools.count()
        threading.Thread(target=self._beat_forever, name="heartbeats", daemon=True).start()

    def add(self, store: Store, task_id: str, every: float) -> int:
        token = next(self._tokens)
        self._running[token] = (store, task_id)
        due = time.monotonic() + every
        queue = self._queues.get(every)
        if queue is None:
            queue = self._queues.setdefault(every, deque())
        queue.append((due, token))
        # The thread sleeps until the earliest beat it knows of; waking it
        # for a later one (every task, since they share `every`) would only
        # cost the running task a thread switch. While it looks (0.0) its
        # scan may have passed this queue already: the notice waits for the
        # lock it looks under, so it reaches the thread once it sleeps.
        wake_at = self._wake_at
        if wake_at == 0.0 or due < wake_at:
            with self._changed:
                self._changed.notify()
        return token

    def remove(self, token: int) -> None:
        self._running.pop(token, None)

    def _beat_forever(self) -> None:
        while True:
            # Tasks started together fall due together: one call per store
            # for all of them, not a burst of round trips holding up the
            # process's running tasks.
            for store, task_ids in self._next_due():
                try:
                    store.heartbeat(*task_ids)
                except StoreError as error:
                    # One missed beat is harmless (stale_after spans several); keep trying.
                    log.warning("heartbeat of %d task(s) failed: %s", len(task_ids), error)
                except Exception:
                    log.exception("heartbeat of %d task(s) failed", len(task_ids))

    def _next_due(self) -> list[tuple[Store, list[str]]]:
        """Wait until some task is due; those tasks by store, each rescheduled."""
        running = self._running
        with self._changed:
            while True:
                self._wake_at = 0.0  # looking: a task added from now on wakes the thread
                now = time.monotonic()
                due: dict[int, tuple[Store, list[str]]] = {}
                earliest = math.inf
                for every, queue in list(self._queues.items()):
                    # When the first is due, those due within the next share
                    # of an interval beat now too (never later than due, so no
                    # gap exceeds `every`): tasks started a moment apart fall
                    # into step, and a process holding thousands beats them in
                    # a few calls an interval, not one wake-up and round trip
                    # each. (A wake-up for another interval takes none early.)
                    upto = now + every * EARLY_SHARE if queue and queue[0][0] <= now else now
                    while queue and queue[0][0] <= upto:
                        _, token = queue.popleft()
                        entry = running.get(token)
                        if entry is not None:
                            store, task_id = entry
                            due.setdefault(id(store), (store, []))[1].append(task_id)
                            queue.append((now + every, token))
                    while queue and queue[0][1] not in running:
                        queue.popleft()  # its task ended
                    # With none running at this interval, it looks again an
                    # interval from now: any task added since falls due after
                    # that, so the next one (after a task that ended before
                    # its first beat: most of them) need not wake it.
                    earliest = min(earliest, queue[0][0] if queue else now + every)
                if due:
                    return list(due.values())
                self._wake_at = earliest
                self._changed.wait(None if earliest == math.inf else earliest - now)


_beats: _Beats | None = None
_beats_lock = threading.Lock()


def _process_beats() -> _Beats:
    global _beats
    made = _beats
    if made is not None:  # every task asks: no lock once it is made
        return made
    with _beats_lock:
        if _beats is None:
            _beats = _Beats()
        return _beats


def _forget_in_child() -> None:
    """A forked child (a prefork pool process) makes its own beats: the
    parent's thread did not come along, and its lock may be held."""
    global _beats, _beats_lock
    _beats, _beats_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)
