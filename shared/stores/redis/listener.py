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
its connection with it); the next watch starts it again (the thread's life
and the catching up: `shared.store.notices`).

A subscribed connection waits for messages without a timeout, so one lost
without a word (a partition, a host gone) would never be noticed: after
`PROBE_AFTER` seconds without a message the listener sends a PING on it,
and a PING unanswered within the store's timeout counts as the connection
lost.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis

from shared.backoff import Backoff
from shared.redis_nodes.pools import subscriber_pool
from shared.store.notices import Listener, Newest

log = logging.getLogger(__name__)

_POLL = 1.0
# Seconds without a message after which the connection is asked whether it is still there.
PROBE_AFTER = 5.0


class RedisListener(Listener):
    thread_name = "toolnexus-events"
    cannot = "cannot subscribe to task events"
    unreadable = (redis.RedisError,)

    def __init__(self, client: redis.Redis, channel: str, newest: Newest) -> None:
        super().__init__(newest)
        # Its own connection pool: a subscribed connection can do nothing else,
        # and must not time out while the channel is quiet.
        self._pool = subscriber_pool(client.connection_pool)
        self._channel = channel
        self._client = client
        # How long a PING may go unanswered: the store's own timeout.
        timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
        self._answer_within = float(timeout or _POLL * 2)

    def _forked(self) -> None:
        self._pool.reset()  # the parent's connections are not this process's to use

    def _answers(self) -> bool:
        """Whether Redis itself answers (only this connection was lost)."""
        try:
            return bool(self._client.ping())
        except (redis.RedisError, OSError):
            return False

    def _listen(self, ready: threading.Event) -> None:
        backoff = Backoff(initial=0.05, cap=2.0)
        while not self._idle():
            client: Any = redis.Redis(connection_pool=self._pool)
            pubsub = client.pubsub()
            try:
                pubsub.subscribe(self._channel)
                heard, probed = time.monotonic(), 0.0
                while True:
                    message = pubsub.get_message(timeout=_POLL)
                    now = time.monotonic()
                    if message is None:
                        if self._idle():
                            return
                        if probed and now - probed > self._answer_within:
                            raise redis.TimeoutError(
                                f"no answer to a PING within {self._answer_within:g} s"
                            )
                        if not probed and now - heard > PROBE_AFTER:
                            pubsub.ping()
                            probed = now
                        continue
                    heard, probed = now, 0.0
                    if message["type"] == "subscribe":
                        ready.set()
                        backoff.reset()
                        self._caught_up()  # events published while we were away
                    elif message["type"] == "message":
                        self._heard(message["data"].decode())
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
