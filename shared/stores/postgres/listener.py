"""One LISTEN connection per process that hears of every task event.

Each write's function calls `pg_notify(channel, '<id> <n>')` in the write's
own transaction, so the notice goes out when (and only if) the write
commits. A daemon thread here holds a dedicated connection (not one of the
pool's: a listening session must stay in this process and stay open) and
wakes this process's waiters for that task with that number.

When the connection cannot be had (the server is down, or a pooler in
transaction mode that does not pass LISTEN on), or notices are turned off
(`notify=False`, for write loads where NOTIFY's commit-time lock costs
too much), a poller takes over: every `POLL` seconds it asks for the newest
event number of every watched task in one query and wakes those behind.
It polls the watched tasks' own numbers rather than one global sequence:
sequence values are handed out before commit, so a reader of a global
counter can pass a value whose transaction commits later, and miss it.

After a fork the child starts its own thread and connection on its next
watch; after `IDLE_EXIT` seconds with nothing watched the thread stops.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import psycopg

from shared.backoff import Backoff
from shared.errors import StoreError
from shared.watching import Notifier

log = logging.getLogger(__name__)

READY_TIMEOUT = 2.0
# How often the fallback poller reads the watched tasks' numbers.
POLL = 0.1
# How long one wait for notices lasts before the thread looks around.
_LISTEN_SLICE = 1.0
IDLE_EXIT = 30.0
RESYNC_BATCH = 1000

Newest = Callable[[list[str]], list[int | None]]


class Listener:
    def __init__(self, conninfo: str, channel: str, newest: Newest, *, notify: bool) -> None:
        self._conninfo = conninfo
        self._channel = channel
        self._newest = newest
        self._notify = notify
        self.notifier = Notifier()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._pid = -1
        self._running = False
        self._wanted = 0.0

    def ensure_listening(self) -> None:
        with self._lock:
            self._wanted = time.monotonic()
            if self._pid != os.getpid() or not self._running:
                self._pid, self._running = os.getpid(), True
                self._ready = threading.Event()
                threading.Thread(
                    target=self._run, args=(self._ready,), name="toolnexus-pg-events", daemon=True
                ).start()
            ready = self._ready
        if not ready.wait(READY_TIMEOUT):
            raise StoreError("task store unavailable: cannot listen for task events")

    def _idle(self) -> bool:
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
        """Wake each watched task's waiters with its newest number; every
        waiter when the numbers cannot be had. True when they could be had."""
        watched = self.notifier.watched()
        try:
            for start in range(0, len(watched), RESYNC_BATCH):
                batch = watched[start : start + RESYNC_BATCH]
                for task_id, newest in zip(batch, self._newest(batch), strict=True):
                    self.notifier.notify(task_id, newest)
        except StoreError:
            self.notifier.notify_all()
            return False
        return True

    def _run(self, ready: threading.Event) -> None:
        backoff = Backoff(initial=0.05, cap=2.0)
        while not self._idle():
            if not self._notify:
                ready.set()
                self._caught_up()
                threading.Event().wait(POLL)
                continue
            try:
                with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=2) as conn:
                    conn.execute(f'LISTEN "{self._channel}"')
                    ready.set()
                    backoff.reset()
                    self._caught_up()  # events committed while we were away
                    while not self._idle():
                        for notice in conn.notifies(timeout=_LISTEN_SLICE):
                            task_id, _, newest = notice.payload.partition(" ")
                            self.notifier.notify(task_id, int(newest) if newest.isdigit() else None)
                    return
            except psycopg.Error as error:
                if self._unwatched():
                    return  # nobody to wake: the next watch starts a listener again
                # Meanwhile the poller stands in; a waiter's wait never misses.
                ready.set()
                self._caught_up()
                delay = backoff.next()
                log.warning(
                    "task events: cannot listen (%s); polling, retry in %.2f s", error, delay
                )
                self._poll_for(delay)

    def _poll_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            threading.Event().wait(min(POLL, max(0.0, deadline - time.monotonic())))
            self._caught_up()
