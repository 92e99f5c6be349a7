"""One LISTEN connection per process that hears of every task event.

Each write's function calls `pg_notify(channel, '<id> <n>')` in the write's
own transaction, so the notice goes out when (and only if) the write
commits. A daemon thread here holds a dedicated connection (not one of the
pool's: a listening session must stay in this process and stay open) and
wakes this process's waiters for that task with that number (the thread's
life and the catching up: `shared.store.notices`).

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

A connection can be lost without a word (a partition, a host gone): no
notice comes, and none would. So after every `timeout` seconds without a
notice the thread asks the server something on that connection, with the
store's deadline (`shared.stores.postgres.session`): no answer, and the
connection is abandoned, the poller stands in, and a new one is made.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg

from shared.backoff import Backoff
from shared.errors import StoreError
from shared.ops.patching import gevent_patched
from shared.store.notices import Listener, Newest
from shared.stores.postgres.session import connection_class

log = logging.getLogger(__name__)

# How often the fallback poller reads the watched tasks' numbers.
POLL = 0.1
# How long one wait for notices lasts before the thread looks around.
_LISTEN_SLICE = 1.0


class PostgresListener(Listener):
    thread_name = "toolnexus-pg-events"
    cannot = "cannot listen for task events"
    unreadable = (StoreError,)

    def __init__(
        self, conninfo: str, channel: str, newest: Newest, *, notify: bool, timeout: float
    ) -> None:
        super().__init__(newest)
        self._conninfo = conninfo
        self._channel = channel
        self._notify = notify
        self._timeout = timeout
        self._connection = connection_class(timeout, green=gevent_patched())

    def _listen(self, ready: threading.Event) -> None:
        backoff = Backoff(initial=0.05, cap=2.0)
        while not self._idle():
            if not self._notify:
                ready.set()
                self._caught_up()
                threading.Event().wait(POLL)
                continue
            try:
                with self._connection.connect(
                    self._conninfo, autocommit=True, connect_timeout=2
                ) as conn:
                    conn.execute(f'LISTEN "{self._channel}"')
                    ready.set()
                    backoff.reset()
                    self._caught_up()  # events committed while we were away
                    heard = time.monotonic()
                    while not self._idle():
                        for notice in conn.notifies(timeout=_LISTEN_SLICE):
                            self._heard(notice.payload)
                            heard = time.monotonic()
                        if time.monotonic() - heard > self._timeout:
                            conn.execute("SELECT 1")  # still there? (within the deadline)
                            heard = time.monotonic()
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
