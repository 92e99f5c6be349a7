"""Redis faults as one StoreError that names the cause, for every room kept
in Redis (the tasks, their push state)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis
from redis.sentinel import MasterNotFoundError

from shared.errors import StoreError
from shared.quoting import truncated
from shared.redis_nodes.pools import forget_idle, node_of


@contextmanager
def reachable(client: redis.Redis) -> Iterator[None]:
    """Any failure of Redis itself (down, wrong password, out of memory, a
    read-only replica) is one StoreError that names the cause."""
    try:
        yield
    except redis.RedisError as error:
        if isinstance(error, redis.TimeoutError):
            forget_idle(client.connection_pool)
        detail = truncated(str(error) or type(error).__name__, 200)
        raise StoreError(
            f"task store unavailable: Redis at {node_of(client.connection_pool)}: {detail}",
            _reason(error),
        ) from error


# What Redis said, as an operator reads it; the first marker found wins.
_REASONS = (
    ("WRONGPASS", "Redis refused the password"),
    ("NOAUTH", "Redis requires a password"),
    ("NOPERM", "the Redis user lacks a permission"),
    ("DENIED", "Redis refuses remote clients (protected mode)"),
    ("OOM", "Redis is out of memory"),
    ("READONLY", "Redis is a read-only replica"),
    ("LOADING", "Redis is loading its data"),
    ("MISCONF", "Redis cannot persist its data"),
)


# redis-py turns most error replies into classes and drops the marker from
# the text ("WRONGPASS invalid username-password pair" reads "invalid
# username-password pair"), so the class decides first.
_CLASS_REASONS: tuple[tuple[type[redis.RedisError], str], ...] = (
    (MasterNotFoundError, "Sentinel names no healthy master: failing over"),
    (redis.exceptions.NoPermissionError, "the Redis user lacks a permission"),
    (redis.exceptions.OutOfMemoryError, "Redis is out of memory"),
    (redis.exceptions.ReadOnlyError, "Redis is a read-only replica"),
    (redis.exceptions.BusyLoadingError, "Redis is loading its data"),
)


def _reason(error: redis.RedisError) -> str:
    text = str(error)
    if isinstance(error, redis.AuthenticationError):
        wrong = "invalid username-password pair" in text or "WRONGPASS" in text
        return "Redis refused the password" if wrong else "Redis requires a password"
    for kind, reason in _CLASS_REASONS:
        if isinstance(error, kind):
            return reason
    for marker, reason in _REASONS:
        if marker in text:
            return reason
    if isinstance(error, redis.TimeoutError):
        return "Redis did not answer in time"
    if isinstance(error, redis.ConnectionError):
        return "cannot connect to Redis"
    return "Redis refused the command"
