"""One pub/sub connection per process that hears of every task event.

Each commit publishes the task id and its newest event's number on one
channel (inside the same script as the write). A daemon thread here listens
on its own connection and wakes this process's waiters for that task with
that number; those that have not read that far then read the events from
the task's stream by number. When the connection drops while Redis is
down, every waiter is woken to re-read (and hear of the outage); the
listener reconnects with backoff, and once subscribed again asks for the
newest number of every watched task in one round trip, so only the streams
that missed something re-read.
A process with nothing to wait for lets the listener go after a while (and
its connection with it); the next watch starts it again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from shared.backoff import Backoff
from shared.errors import StoreError
from shared.watching import Notifier

log = logging.getLogger(__name__)

# How long a new watcher waits for the subscription to be confirmed before
# reading anyway; a missed wake-up then only delays an event to the next poll.
READY_TIMEOUT = 2.0
_POLL = 1.0
# Seconds without a watcher after which the listener stops.
IDLE_EXIT = 30.0
# Watched tasks whose newest event numbers are asked for in one round trip.
RESYNC_BATCH = 1000

# The newest event number of each task (None: unknown), from the store.
Newest = Callable[[list[str]], list[int | None]]


class Listener:
    def __init__(self, client: redis.Redis, channel: str, newest: Newest) -> None:
        # Its own connection pool: a subscribed connection can do nothing else,
        # and must not time out while the channel is quiet.
        kwargs = dict(client.connection_pool.connection_kwargs)
        kwargs.update(socket_timeout=None)
        self._pool = redis.ConnectionPool(
            connection_class=client.connection_pool.connection_class, **kwargs
        )
        self._channel = channel
        self._client = client
        self._newest = newest
        self.notifier = Notifier()
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._pid = -1
        self._running = False
        self._wanted = 0.0  # when a watch last asked for the listener

    def ensure_listening(self) -> None:
        """Start the listener in this process (again after a fork, or after it
        went idle) and wait briefly for its subscription, so no event after
        this call is missed."""
        with self._lock:
            self._wanted = time.monotonic()
            if self._pid != os.getpid() or not self._running:
                if self._pid != os.getpid():
                    self._pool.reset()
                self._pid, self._running = os.getpid(), True
                self._ready = threading.Event()
                thread = threading.Thread(
                    target=self._run, args=(self._ready,), name="toolnexus-events", daemon=True
                )
                thread.start()
            ready = self._ready
        if not ready.wait(READY_TIMEOUT):
            raise StoreError("task store unavailable: cannot subscribe to task events")

    def _caught_up(self) -> None:
        """Wake each watched task's waiters with its newest event number (one
        round trip per batch): only those behind it re-read. Everyone re-reads
        when the numbers cannot be had."""
        watched = self.notifier.watched()
        try:
            for start in range(0, len(watched), RESYNC_BATCH):
                batch = watched[start : start + RESYNC_BATCH]
                for task_id, newest in zip(batch, self._newest(batch), strict=True):
                    self.notifier.notify(task_id, newest)
        except redis.RedisError:
            self.notifier.notify_all()

    def _answers(self) -> bool:
        """Whether Redis itself answers (only this connection was lost)."""
        try:
            return bool(self._client.ping())
        except (redis.RedisError, OSError):
            return False

    def _idle(self) -> bool:
        """True (and the listener marked stopped) when nobody has watched for a while."""
        with self._lock:
            if len(self.notifier) or time.monotonic() - self._wanted < IDLE_EXIT:
                return False
            self._running = False
            return True

    def _run(self, ready: threading.Event) -> None:
        backoff = Backoff(initial=0.05, cap=2.0)
        while not self._idle():
            client: Any = redis.Redis(connection_pool=self._pool)
            pubsub = client.pubsub()
            try:
                pubsub.subscribe(self._channel)
                while True:
                    message = pubsub.get_message(timeout=_POLL)
                    if message is None:
                        if self._idle():
                            return
                        continue
                    if message["type"] == "subscribe":
                        ready.set()
                        backoff.reset()
                        self._caught_up()  # events published while we were away
                    elif message["type"] == "message":
                        task_id, _, newest = message["data"].decode().partition(" ")
                        self.notifier.notify(task_id, int(newest) if newest.isdigit() else None)
            except (redis.ConnectionError, redis.TimeoutError, OSError) as error:
                ready.clear()
                if not self._answers():
                    self.notifier.notify_all()  # Redis is down: every stream says so
                delay = backoff.next()
                log.warning("task events: connection lost (%s); retrying in %.2f s", error, delay)
                threading.Event().wait(delay)
            finally:
                try:
                    pubsub.close()
                except Exception:  # closing a broken connection may fail too
                    log.debug("task events: closing the pub/sub connection failed", exc_info=True)
