"""Turn a store spec into a store; pass anything that is not a string through.

What it returns may be a user's two-method store: the wiring
(`shared.store.wiring.open_store`) adapts such a store to the whole contract.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shared.errors import ConfigError
from shared.loading import load_object
from shared.store.spec import (
    ALWAYS,
    POOL_SIZE,
    POSTGRES_SCHEMES,
    POSTGRES_TIMEOUT,
    REDIS_SCHEMES,
    SQLITE_SCHEME,
    check_store_spec,
    sqlite_path,
)
from shared.stores.file.store import file_store
from shared.stores.memory.store import memory_store
from shared.stores.redis.store import redis_store
from shared.stores.sqlite.store import sqlite_store


def resolve_store(
    spec: object = None,
    *,
    terminal_ttl: float | None = None,
    file_fsync: str = ALWAYS,
    connections: int | None = None,
    postgres_pool: int | None = None,
    postgres_notify: bool = True,
    postgres_timeout: float = POSTGRES_TIMEOUT,
    sentinel_password: str | None = None,
    redis_min_replicas: int = 0,
    redis_replica_timeout: float = 1.0,
) -> Any:
    """`None`/"memory" -> memory store; "file:<dir>" -> file store;
        "sqlite:///<path>" -> SQLite store (`shared.stores.sqlite`); a Redis URL
        -> Redis store; a postgresql:// URL -> PostgreSQL store (`shared.stores.postgres`);
        "package.module:attr" -> that object (called when it is a
        factory, i.e. a class or function rather than a store), refused unless it
        has `get` and `save`; any other non-string object -> that object, as it is.
        Any other string raises ValueError. Nothing here adapts a store that
        lacks part of the contract: `shared.store.wiring.open_store` does.

        `terminal_ttl` (seconds) lets the store expire finished tasks;
        `file_fsync` is the file and SQLite stores' fsync policy (`shared.stores.file.store`).
        `connections` sizes a Redis store's connection pool (None: its default);
        a PostgreSQL store's is `postgres_pool` (TOOLNEXUS_PG_POOL) when given,
        since a server's connections are far fewer than a Redis' and an I/O call
        needs one only for its statement; `postgres_notify` (TOOLNEXUS_PG_NOTIFY)
        False makes it poll instead of LISTEN/NOTIFY, and `postgres_timeout`
    (TOOLNEXUS_PG_TIMEOUT) bounds its every statement. A Redis store takes
        Sentinel's own password (for a redis+sentinel:// URL) and the replicas
        each write waits for, and how long.
    """
    if spec is None or spec == "memory":
        return memory_store(terminal_ttl=terminal_ttl)
    if not isinstance(spec, str):
        return spec
    check_store_spec(spec)
    if spec.startswith("file:"):
        folder = spec.removeprefix("file:")
        try:
            return file_store(folder, terminal_ttl=terminal_ttl, fsync=file_fsync)
        except OSError as error:
            reason = _unusable_folder(folder, error)
            raise ConfigError(f"TOOLNEXUS_STORE={spec!r}: {reason}") from None
    if spec.startswith(SQLITE_SCHEME):
        database = Path(sqlite_path(spec))
        if not database.parent.is_dir():
            raise ConfigError(
                f"TOOLNEXUS_STORE={spec!r}: {str(database.parent)!r} is not a directory;"
                " the database's folder must exist"
            )
        return sqlite_store(database, terminal_ttl=terminal_ttl, fsync=file_fsync == ALWAYS)
    if spec.startswith(POSTGRES_SCHEMES):
        return _postgres_store(
            spec, terminal_ttl, postgres_pool or connections, postgres_notify, postgres_timeout
        )
    if spec.startswith(REDIS_SCHEMES):
        return redis_store(
            spec,
            terminal_ttl=terminal_ttl,
            connections=connections or POOL_SIZE,
            sentinel_password=sentinel_password,
            min_replicas=redis_min_replicas,
            replica_timeout=redis_replica_timeout,
        )
    target = load_object(spec, "TOOLNEXUS_STORE")
    if isinstance(target, type) or (callable(target) and not _is_store(target)):
        try:
            target = target()
        except Exception as error:  # the user's factory: any failure is a configuration one
            raise ConfigError(
                f"TOOLNEXUS_STORE: {spec!r} raised {type(error).__name__}: {error}"
            ) from error
    if not _is_store(target):
        raise ConfigError(
            f"TOOLNEXUS_STORE: {spec!r} has no get() and save(); it is not a task store"
        )
    return target


def _postgres_store(
    spec: str, terminal_ttl: float | None, connections: int | None, notify: bool, timeout: float
) -> Any:
    """Imported only when chosen, so a missing psycopg matters only then."""
    try:
        from shared.stores.postgres import postgres_store
    except ImportError as error:
        if error.name in ("shared.stores.postgres", "shared.stores"):
            raise ConfigError(
                "TOOLNEXUS_STORE: a postgresql:// store needs shared.stores.postgres,"
                " which this installation does not have"
            ) from None
        raise ConfigError(
            f"TOOLNEXUS_STORE: the PostgreSQL store cannot be loaded ({error});"
            " install toolnexus-serve[postgres]"
        ) from None
    return postgres_store(
        spec, terminal_ttl=terminal_ttl, connections=connections, notify=notify, timeout=timeout
    )


def _unusable_folder(folder: str, error: OSError) -> str:
    """Why `folder` cannot hold tasks, in words: the path, or one above it,
    that is a file; otherwise the system's reason."""
    path = Path(folder)
    for candidate in (path, *path.parents):
        if candidate.exists() and not candidate.is_dir():
            if candidate == path:
                return f"{folder!r} is a regular file, not a directory"
            return f"{folder!r} is under {str(candidate)!r}, a regular file, not a directory"
    return f"cannot use {folder!r} as the task folder: {error.strerror or error}"


def _is_store(candidate: object) -> bool:
    return callable(getattr(candidate, "get", None)) and callable(getattr(candidate, "save", None))
