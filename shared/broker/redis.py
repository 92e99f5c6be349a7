"""kombu's Redis transport, with one Redis client per channel instead of one per command.

kombu makes a new `redis.Redis` for every publish, and redis-py's
constructor fills a table of some 170 response callbacks each time: for a
sent task (its message and its task-sent event) that costs more CPU than the
rest of the front end's work on a send. A client is safe to share: every
command still takes a connection from the channel's pool, as with kombu's
own clients.

Both Celery apps (the front end's dispatcher and the worker's, with beat
and Flower) select it through `broker_transport` for redis:// and
rediss:// brokers, and its Sentinel twin for redis+sentinel:// ones, which
`celery_broker` turns into kombu's own form (`sentinel://` per Sentinel,
the master's name and Sentinel's password as transport options); other
brokers keep their own transport.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final
from urllib.parse import quote

import redis
from kombu.transport import redis as kombu_redis
from redis.client import PubSub
from redis.exceptions import ConnectionError as RedisConnectionError

from shared.errors import ConfigError
from shared.redis_nodes.url import is_sentinel, parse_sentinel

_REDIS_SCHEMES = frozenset({"redis", "rediss"})


# A pub/sub reply the poller said was there, waited for at most this long
# where the connection sets no socket timeout of its own.
PUBSUB_WITHIN: Final = 4.0


class _BoundedPubSub(PubSub):
    """kombu reads a pub/sub reply (the workers' remote control: revokes,
    pings) with a blocking `parse_response()` once its poller says the
    socket is readable. redis-py reads a blocking reply with no timeout at
    all, not even the socket timeout, so a readiness that brings no whole
    reply (a connection lost in a partition, a socket the poller confused
    with another across a reconnect) blocked the worker's event loop for good:
    no message consumed again, no health check run. Here a blocking read
    waits at most the connection's socket timeout and then answers "no
    reply", which kombu's loop takes as nothing to do; its health checks
    then find a dead connection and make a new one."""

    def parse_response(self, block: bool = True, timeout: float = 0) -> Any:
        if block:
            connection = self.connection
            within = getattr(connection, "socket_timeout", None) or PUBSUB_WITHIN
            return super().parse_response(block=False, timeout=within)  # type: ignore[no-untyped-call]
        return super().parse_response(block=block, timeout=timeout)  # type: ignore[no-untyped-call]


class _Client(redis.Redis):
    """kombu's client, whose pub/sub object waits within a deadline."""

    def pubsub(self, **kwargs: Any) -> PubSub:
        made: PubSub = super().pubsub(**kwargs)  # type: ignore[no-untyped-call]
        made.__class__ = _BoundedPubSub  # the same object, its blocking read bounded
        return made


class _SharedClient:
    """One client per channel, and a closed connection reported as lost."""

    _shared_client: Any = None
    pool: Any
    connection: Any

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool  # made again after a disconnect: the client follows it
        shared = self._shared_client
        if shared is None or shared.connection_pool is not pool:
            shared = self._shared_client = self._create_client()  # type: ignore[attr-defined]
        yield shared

    def _get_client(self) -> Any:
        chosen = super()._get_client()  # type: ignore[misc]
        # kombu's own redis.Redis (a global key prefix has a client of its own)
        return _Client if chosen is redis.Redis else chosen

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
        return super()._get_pool(asynchronous)  # type: ignore[misc]


class Channel(_SharedClient, kombu_redis.Channel):
    pass


class SentinelChannel(_SharedClient, kombu_redis.SentinelChannel):
    pass


class _Poller(kombu_redis.MultiChannelPoller):
    """kombu's checks of a consumer's long-lived connections (a BRPOP whose
    reply is overdue, a pub/sub connection that missed its health checks)
    drop the connection and make it again inside the worker's event loop.
    After a partition of the broker's link that repair sometimes left a
    worker consuming nothing for good (the histories: one run in ten on the
    file store's fleet), its registrations with the loop out of step with
    its sockets. Here a failed check is a lost connection instead: Celery's
    consumer then starts its broker connection again from scratch, channels,
    prefetch and registrations with it, as after any broker loss."""

    def maybe_check_brpop_health(self) -> None:
        waiting = {channel: channel._in_poll for channel in self._channels}
        super().maybe_check_brpop_health()  # type: ignore[no-untyped-call]
        if any(was and channel._in_poll is None for channel, was in waiting.items()):
            raise RedisConnectionError("the broker's reply to BRPOP is overdue: connection lost")

    def maybe_check_subclient_health(self) -> None:
        listening = {channel: channel._in_listen for channel in self._channels}
        super().maybe_check_subclient_health()  # type: ignore[no-untyped-call]
        if any(was and channel._in_listen is None for channel, was in listening.items()):
            raise RedisConnectionError("the broker's pub/sub connection missed its health checks")


class Transport(kombu_redis.Transport):
    Channel = Channel

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.cycle = _Poller()  # type: ignore[no-untyped-call, assignment]


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.cycle = _Poller()  # type: ignore[no-untyped-call, assignment]


# A broker connection lost without a word (a partition, a NAT or firewall
# dropping its state) must be given up, not waited on for ever: a command's
# reply is waited for at most `socket_timeout`, and kombu drops a consumer's
# BRPOP whose reply is overdue by `health_check_interval` (so a worker
# consumes again within about 1 + 2 x 2 s). The price: a command on a
# connection idle for longer than that is preceded by a PING.
LOST_CONNECTIONS: Final[dict[str, Any]] = {
    "socket_connect_timeout": 2.0,
    "socket_timeout": 4.0,
    "socket_keepalive": True,
    "health_check_interval": 2,
}


def broker_transport(broker_url: str) -> str | None:
    """The transport for Celery's `broker_transport` setting (None: the URL's own)."""
    if is_sentinel(broker_url):
        return f"{__name__}:SentinelTransport"
    scheme = broker_url.partition("://")[0].lower()
    return f"{__name__}:Transport" if scheme in _REDIS_SCHEMES else None


def celery_broker(
    broker_url: str, sentinel_password: str | None, timeouts: dict[str, float] | None = None
) -> tuple[str, dict[str, Any]]:
    """The broker URL Celery is given, and the transport options it needs for
    it: for a redis+sentinel:// URL kombu's `sentinel://` list, the master's
    name, and how to reach the Sentinels (their password, `timeouts`);
    any other URL as it is, with none."""
    if not is_sentinel(broker_url):
        return broker_url, {}
    target = parse_sentinel(broker_url)
    if target.tls:
        raise ConfigError(
            "TOOLNEXUS_BROKER_URL: rediss+sentinel:// is not supported for the broker"
            " (kombu's Sentinel transport); use redis+sentinel:// or a rediss:// URL"
        )
    login = ""
    if target.username or target.password is not None:
        login = f"{quote(target.username or '', safe='')}:{quote(target.password or '', safe='')}@"
    hosts = ";".join(
        f"sentinel://{login}{_bracketed(host)}:{port}/{target.db}"
        for host, port in target.sentinels
    )
    sentinel_kwargs: dict[str, Any] = dict(timeouts or {})
    if sentinel_password:
        sentinel_kwargs["password"] = sentinel_password
    return hosts, {"master_name": target.master, "sentinel_kwargs": sentinel_kwargs}


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host
