"""Connection pools for one Redis server or for the master a Sentinel group names.

Every user of Redis in a process (the task store and its push state, the
event listener, the broker's direct sender) takes its pool from here, so a
Sentinel failover moves all of them the same way: a pooled connection to
the old master fails (it died, or answers READONLY once demoted), is
dropped, and the next connection asks the Sentinels where the master is
now. While the Sentinels name no healthy master (between the master's death
and the promotion) every call fails at once as "store unavailable", naming
the failover, instead of hanging.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import redis
from redis.sentinel import Sentinel, SentinelConnectionPool

from shared.redis_nodes.green import check_readiness_off_the_hub
from shared.redis_nodes.url import SentinelTarget, is_sentinel, parse_sentinel

OnFailover = Callable[[str, tuple[str, int], tuple[str, int]], None]


def _nothing(master: str, before: tuple[str, int], after: tuple[str, int]) -> None:
    pass


class BlockingSentinelPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """Sentinel's master-following pool that waits for a free connection, as
    the store's plain pool does, instead of failing when all are busy. The
    Sentinel part decides where a connection goes (and drops connections to
    a master that is no longer the master); the blocking part how many."""


class FollowingSentinel(Sentinel):
    """A Sentinel client that notices the master moving, to count failovers."""

    def __init__(self, *args: Any, on_failover: OnFailover = _nothing, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._on_failover = on_failover
        self._masters: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()

    def discover_master(self, service_name: str) -> tuple[str, int]:
        address: tuple[str, int] = super().discover_master(service_name)  # type: ignore[no-untyped-call]
        with self._lock:
            before = self._masters.get(service_name)
            self._masters[service_name] = address
        if before is not None and before != address:
            self._on_failover(service_name, before, address)
        return address


def blocking_pool(
    url: str,
    *,
    max_connections: int,
    timeout: float,
    sentinel_password: str | None = None,
    on_failover: OnFailover = _nothing,
    **connection: Any,
) -> redis.ConnectionPool:
    """A pool of at most `max_connections`, waiting up to `timeout` for a free
    one, with `connection` options (timeouts, retries) for each connection:
    to the server a redis://, rediss:// or unix:// URL names, or to the
    master a redis+sentinel:// URL names (`sentinel_password` for the
    Sentinels themselves, the URL's password for the master)."""
    check_readiness_off_the_hub()
    if not is_sentinel(url):
        return redis.BlockingConnectionPool.from_url(
            url, max_connections=max_connections, timeout=timeout, **connection
        )
    target = parse_sentinel(url)
    master: dict[str, Any] = {"db": target.db, **connection}
    if target.username:
        master["username"] = target.username
    if target.password is not None:
        master["password"] = target.password
    if target.tls:
        master["ssl"] = True
    sentinel = FollowingSentinel(
        list(target.sentinels),
        sentinel_kwargs=sentinel_options(target, sentinel_password, connection),
        on_failover=on_failover,
    )
    client = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.master,
        connection_pool_class=BlockingSentinelPool,
        max_connections=max_connections,
        timeout=timeout,
        **master,
    )
    return client.connection_pool  # type: ignore[no-any-return]


def sentinel_options(
    target: SentinelTarget, password: str | None, connection: dict[str, Any]
) -> dict[str, Any]:
    """How to talk to the Sentinels: their own password, the same timeouts as
    the master's connections, and TLS when the master uses it."""
    options: dict[str, Any] = {
        key: connection[key]
        for key in ("socket_timeout", "socket_connect_timeout")
        if key in connection
    }
    if password:
        options["password"] = password
    if target.tls:
        options["ssl"] = True
    return options


def forget_idle(pool: redis.ConnectionPool) -> None:
    """After a call found its connection silent (a timeout): the pool's idle
    connections, made alongside it, were likely lost the same way (a
    partition, a middlebox dropping them). They connect again on their next
    use instead of each being found out by a timeout of its own."""
    pool.disconnect(inuse_connections=False)


def node_of(pool: redis.ConnectionPool, answered: str | None = None) -> str:
    """Where the pool's connections go, as an operator reads it (no password):
    host:port or a socket path; on Sentinel, the master's name and its
    address: the one that `answered` a call (the server's own host:port, as
    CLIENT INFO's laddr gives it) where known, else the one last heard of."""
    if isinstance(pool, SentinelConnectionPool):
        address = pool.master_address
        where = f"{address[0]}:{address[1]}" if address else "(no master heard of yet)"
        return f"{answered or where} (master {pool.service_name!r} via Sentinel)"
    kwargs = pool.connection_kwargs
    return str(kwargs.get("path") or f"{kwargs.get('host')}:{kwargs.get('port')}")


def subscriber_pool(pool: redis.ConnectionPool) -> redis.ConnectionPool:
    """A pool like `pool` for pub/sub: its connections never time out on a
    quiet channel, and on Sentinel they follow the same master."""
    kwargs = dict(pool.connection_kwargs)
    kwargs.update(socket_timeout=None)
    return redis.ConnectionPool(connection_class=pool.connection_class, **kwargs)


# Connection settings that decide which server a plain pool's connections
# reach, and as whom.
_SERVER_KEYS = ("host", "port", "path", "username", "password")


def server_of(pool: redis.ConnectionPool) -> tuple[object, ...] | None:
    """Which server, reached as whom, a plain pool's connections go to: equal
    for two pools on two databases of one server. None on Sentinel, whose
    master is known only once asked for."""
    if isinstance(pool, SentinelConnectionPool):
        return None
    kwargs = pool.connection_kwargs
    return (pool.connection_class.__name__, *(kwargs.get(key) for key in _SERVER_KEYS))


def db_of(pool: redis.ConnectionPool) -> int:
    return int(pool.connection_kwargs.get("db") or 0)
