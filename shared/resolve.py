"""Turn a store spec into a store; pass anything that is not a string through."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from shared.errors import ConfigError
from shared.loading import is_reference, load_object
from shared.stores.file import file_store
from shared.stores.file_log import ALWAYS
from shared.stores.memory import memory_store
from shared.stores.redis.store import POOL_SIZE, redis_store

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")

ACCEPTED_FORMS = (
    "'memory' (or unset), 'file:<dir>', a redis://, rediss:// or unix:// URL,"
    " or 'package.module:attr' naming a store or a factory"
)


def check_url_port(url: str) -> None:
    """ValueError when a URL's port is not a number from 0 to 65535, read now
    rather than when a client first connects (where no setting is named)."""
    try:
        _ = urlsplit(url).port
    except ValueError as error:
        raise ValueError(f"bad port in the URL: {error}") from None


def check_store_spec(spec: str | None) -> None:
    """Validate the form of a spec without connecting or creating anything."""
    if spec is None or spec == "memory":
        return
    if spec.startswith(_REDIS_SCHEMES):
        check_url_port(spec)
        return
    if spec.startswith("file:") and spec != "file:":
        return
    if is_reference(spec):
        return
    raise ValueError(f"unknown store spec {spec!r}; accepted: {ACCEPTED_FORMS}")


def resolve_store(
    spec: object = None,
    *,
    terminal_ttl: float | None = None,
    file_fsync: str = ALWAYS,
    connections: int | None = None,
) -> Any:
    """`None`/"memory" -> memory store; "file:<dir>" -> file store; a Redis URL
    -> Redis store; "package.module:attr" -> that object (called when it is a
    factory, i.e. a class or function rather than a store); any non-string
    object -> returned as is. Any other string raises ValueError.

    `terminal_ttl` (seconds) lets the store expire finished tasks;
    `file_fsync` is the file store's fsync policy (`shared.stores.file_log`).
    `connections` sizes a Redis store's connection pool (None: its default).
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
    if spec.startswith(_REDIS_SCHEMES):
        return redis_store(spec, terminal_ttl=terminal_ttl, connections=connections or POOL_SIZE)
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
