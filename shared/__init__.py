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
from shared.resolve import resolve_store
from shared.settings import Settings
from shared.store import (
    AtomicStore,
    EventStore,
    ListableStore,
    Outcome,
    StaleIndex,
    TaskStore,
    WaitingIndex,
)
from shared.stores.file import FileStore, file_store
from shared.stores.memory import MemoryStore, memory_store
from shared.stores.redis.store import RedisStore, redis_store
from shared.transitions import transition

__all__ = [
    "AtomicStore",
    "BrokerError",
    "ConfigError",
    "ContextTaken",
    "EventStore",
    "FileStore",
    "InvalidTaskId",
    "InvalidTransition",
    "ListableStore",
    "MemoryStore",
    "Outcome",
    "RedisStore",
    "Settings",
    "StaleIndex",
    "StoreError",
    "TaskNotCancelable",
    "TaskNotFound",
    "TaskStore",
    "ToolnexusError",
    "WaitingIndex",
    "file_store",
    "memory_store",
    "redis_store",
    "resolve_store",
    "transition",
]
