"""Task stores, the task shape, settings and errors shared by web and worker.

`shared` imports neither `web` nor `worker`.
"""

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
from shared.transitions import transition

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
    "transition",
]
