"""Task stores, the task shape, settings and errors shared by web and worker.

`shared` imports neither `web` nor `worker`. Each public name below is
imported on first use, so that importing one module of the package (the
store contract, the settings) loads no store backend and no Redis or
PostgreSQL client.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.errors import (
        BrokerError,
        ConfigError,
        ContextTaken,
        InvalidTaskId,
        InvalidTransition,
        StoreError,
        TaskNotCancelable,
        TaskNotFound,
        ToolnexusError,
    )
    from shared.settings import Settings
    from shared.store.contract import Outcome, Store, TaskStore
    from shared.store.resolve import resolve_store
    from shared.stores.file.store import FileStore, file_store
    from shared.stores.memory.store import MemoryStore, memory_store
    from shared.stores.redis.store import RedisStore, redis_store
    from shared.stores.sqlite.store import SqliteStore, sqlite_store
    from shared.transitions import transition

# Each public name -> the module that defines it.
_HOMES = {
    "BrokerError": "shared.errors",
    "ConfigError": "shared.errors",
    "ContextTaken": "shared.errors",
    "InvalidTaskId": "shared.errors",
    "InvalidTransition": "shared.errors",
    "StoreError": "shared.errors",
    "TaskNotCancelable": "shared.errors",
    "TaskNotFound": "shared.errors",
    "ToolnexusError": "shared.errors",
    "Settings": "shared.settings",
    "Outcome": "shared.store.contract",
    "Store": "shared.store.contract",
    "TaskStore": "shared.store.contract",
    "resolve_store": "shared.store.resolve",
    "FileStore": "shared.stores.file.store",
    "file_store": "shared.stores.file.store",
    "MemoryStore": "shared.stores.memory.store",
    "memory_store": "shared.stores.memory.store",
    "RedisStore": "shared.stores.redis.store",
    "redis_store": "shared.stores.redis.store",
    "SqliteStore": "shared.stores.sqlite.store",
    "sqlite_store": "shared.stores.sqlite.store",
    "transition": "shared.transitions",
}

__all__ = [
    "BrokerError",
    "ConfigError",
    "ContextTaken",
    "FileStore",
    "InvalidTaskId",
    "InvalidTransition",
    "MemoryStore",
    "Outcome",
    "RedisStore",
    "Settings",
    "SqliteStore",
    "Store",
    "StoreError",
    "TaskNotCancelable",
    "TaskNotFound",
    "TaskStore",
    "ToolnexusError",
    "file_store",
    "memory_store",
    "redis_store",
    "resolve_store",
    "sqlite_store",
    "transition",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'shared' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
