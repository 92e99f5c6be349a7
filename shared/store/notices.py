"""One thread per process that hears of every task event and wakes its waiters.

A store whose writers tell other processes of each commit (Redis's
pub/sub, PostgreSQL's NOTIFY) keeps one listener: a daemon thread that
holds its own connection and wakes this process's waiters for the task a
notice names, with the number it names. What every such listener does is
here: the thread's life (started by the first watch, again after a fork,
stopped after `IDLE_EXIT` seconds with nothing watched), the notices'
payload (`'<id> <n>'`), and catching up after a gap by asking the store for
the newest number of every watched task. The wake source (the connection,
what it listens on, what it does while that is lost) is the backend's own:
its `_listen`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import ClassVar

from shared.errors import StoreError
from shared.store.wakeups import Notifier, Waiter

# How long a new watch waits for the listener to be ready (heard by the
# server, or a poller standing in) before it fails with StoreError.
READY_TIMEOUT = 2.0
# Seconds without a watcher after which the listener stops.
IDLE_EXIT = 30.0
# Watched tasks whose newest event numbers are asked for in one round trip.
RESYNC_BATCH = 1000

# The newest event number of each task (None: unknown), from the store.
Newest = Callable[[list[str]], list[int | None]]


class Listener:
    """The machinery; a backend's subclass gives `_listen` and says what its
    thread is called, what a watch that cannot be heard is told, and which
    errors mean the store's numbers cannot be had now."""

    thread_name: ClassVar[str]
    cannot: ClassVar[str]  # what a watcher is told when the listener is not ready
    unreadable: ClassVar[tuple[type[Exception], ...]]

    def __init__(self, newest: Newest) -> None:
        self._newest = newest
        self.notifier = Notifier()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._pid = -1
        self._running = False
        self._wanted = 0.0  # when a watch last asked for the listener

    def watch(self, task_id: str) -> AbstractContextManager[Waiter]:
        """The task's waiter, once the listener hears for this process."""
        self.ensure_listening()
        return self.notifier.watch(task_id)

    def ensure_listening(self) -> None:
        """Start the listener in this process (again after a fork, or after it
        went idle) and wait briefly until it is heard, so no event after
        this call is missed."""
        with self._lock:
            self._wanted = time.monotonic()
            if self._pid != os.getpid() or not self._running:
                if self._pid != os.getpid():
                    self._forked()
                self._pid, self._running = os.getpid(), True
                self._ready = threading.Event()
                threading.Thread(
                    target=self._listen, args=(self._ready,), name=self.thread_name, daemon=True
                ).start()
            ready = self._ready
        if not ready.wait(READY_TIMEOUT):
            raise StoreError(f"task store unavailable: {self.cannot}")

    def _forked(self) -> None:
        """This process is new (or the listener's first): let go of what the
        parent's listener kept. Nothing by default."""

    def _listen(self, ready: threading.Event) -> None:
        """The thread: set `ready` once no later event can be missed, hand
        each notice to `_heard`, and return once `_idle()` says so."""
        raise NotImplementedError

    def _heard(self, payload: str) -> None:
        """A notice's payload, `'<id> <n>'`: wake that task's waiters."""
        task_id, _, newest = payload.partition(" ")
        self.notifier.notify(task_id, int(newest) if newest.isdigit() else None)

    def _idle(self) -> bool:
        """True (and the listener marked stopped) when nobody has watched for a while."""
        with self._lock:
            if len(self.notifier) or time.monotonic() - self._wanted < IDLE_EXIT:
                return False
            self._running = False
            return True

    def _unwatched(self) -> bool:
        """True (and the listener marked stopped) when nothing is watched now."""
        with self._lock:
            if len(self.notifier):
                return False
            self._running = False
            return True

    def _caught_up(self) -> bool:
        """Wake each watched task's waiters with its newest event number (one
        round trip per batch): only those behind it re-read. Everyone re-reads
        when the numbers cannot be had. True when they could be had."""
        watched = self.notifier.watched()
        try:
            for start in range(0, len(watched), RESYNC_BATCH):
                batch = watched[start : start + RESYNC_BATCH]
                for task_id, newest in zip(batch, self._newest(batch), strict=True):
                    self.notifier.notify(task_id, newest)
        except self.unreadable:
            self.notifier.notify_all()
            return False
        return True
