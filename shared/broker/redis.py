"""kombu's Redis transport, with one Redis client per channel instead of one per command.

kombu makes a new `redis.Redis` for every publish, and redis-py's
constructor fills a table of some 170 response callbacks each time: for a
sent task (its message and its task-sent event) that costs more CPU than the
rest of the front end's work on a send. A client is safe to share: every
command still takes a connection from the channel's pool, as with kombu's
own clients.

Both Celery apps (the front end's dispatcher and the worker's, with beat
and Flower) select it through `broker_transport` for redis:// and
rediss:// brokers; other brokers keep their own transport.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

_REDIS_SCHEMES = frozenset({"redis", "rediss"})


class Channel(kombu_redis.Channel):
    _shared_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool  # made again after a disconnect: the client follows it
        shared = self._shared_client
        if shared is None or shared.connection_pool is not pool:
            shared = self._shared_client = self._create_client()  # type: ignore[no-untyped-call]
        yield shared

    def _get_pool(self, asynchronous: bool = False) -> Any:
        # kombu makes a pool from the channel's kombu Connection; once that
        # connection is closed (Celery's consumer collects it when Redis goes
        # away) a late publish or ack on a channel whose pool was dropped
        # would die in kombu with AttributeError, which Celery's worker treats
        # as unrecoverable. A connection error is what its recovery expects:
        # the worker reconnects (broker_connection_retry) instead of exiting.
        transport = self.connection
        if transport is None or transport.client is None:
            raise RedisConnectionError("the broker channel's connection is closed")
        return super()._get_pool(asynchronous)  # type: ignore[no-untyped-call]


class Transport(kombu_redis.Transport):
    Channel = Channel


def broker_transport(broker_url: str) -> str | None:
    """The transport for Celery's `broker_transport` setting (None: the URL's own)."""
    scheme = broker_url.partition("://")[0].lower()
    return f"{__name__}:Transport" if scheme in _REDIS_SCHEMES else None
