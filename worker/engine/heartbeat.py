"""Keep running tasks' entries in the store's working index fresh.

One thread per process beats for every task running in it: a thread, not a
signal, so the beat goes on while a fulfilment function blocks in C code or
I/O; it dies with the process, which is the point: a worker that is gone
stops beating and the reaper notices. One for all, not one per task, so a
task costs a registration rather than a thread start and join.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from shared.errors import StoreError
from shared.store.contract import Store

log = logging.getLogger(__name__)


@contextmanager
def heartbeating(store: Store, task_id: str, every: float) -> Iterator[None]:
    """Beat for `task_id` in `store` every `every` seconds until the block
    ends (a store without a stale index takes the beats and keeps nothing)."""
    beats = _process_beats()
    token = beats.add(store, task_id, every)
    try:
        yield
    finally:
        beats.remove(token)


class _Beats:
    """The tasks this process runs, each due for its next beat at a time."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running: dict[int, tuple[Store, str, float]] = {}
        self._due: list[tuple[float, int]] = []  # a heap; entries of removed tasks are skipped
        self._tokens = itertools.count()
        threading.Thread(target=self._beat_forever, name="heartbeats", daemon=True).start()

    def add(self, store: Store, task_id: str, every: float) -> int:
        with self._changed:
            token = next(self._tokens)
            self._running[token] = (store, task_id, every)
            due = time.monotonic() + every
            # The thread sleeps until the earliest beat it knows of; waking
            # it for a later one (every task, since they share `every`) would
            # only cost the running task a thread switch.
            if not self._due or due < self._due[0][0]:
                self._changed.notify()
            heapq.heappush(self._due, (due, token))
            return token

    def remove(self, token: int) -> None:
        with self._changed:
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
        with self._changed:
            while True:
                while self._due and self._due[0][1] not in self._running:
                    heapq.heappop(self._due)  # its task ended
                now = time.monotonic()
                due: dict[int, tuple[Store, list[str]]] = {}
                while self._due and self._due[0][0] <= now:
                    _, token = heapq.heappop(self._due)
                    if token in self._running:
                        store, task_id, every = self._running[token]
                        due.setdefault(id(store), (store, []))[1].append(task_id)
                        heapq.heappush(self._due, (now + every, token))
                if due:
                    return list(due.values())
                self._changed.wait(self._due[0][0] - now if self._due else None)


_beats: _Beats | None = None
_beats_lock = threading.Lock()


def _process_beats() -> _Beats:
    global _beats
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
