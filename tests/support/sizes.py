"""How much memory a store's own objects take, each object counted once."""

from __future__ import annotations

import sys
from collections import deque
from typing import Any

from shared.stores.memory.store import MemoryStore


def kept_by(store: MemoryStore) -> int:
    """Bytes of the objects the store keeps for its tasks, each counted once
    however many places share it."""
    seen: set[int] = set()
    total = 0
    pending: list[Any] = [store._entries]
    while pending:
        value = pending.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        total += sys.getsizeof(value)
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list | tuple | deque):
            pending.extend(value)
        elif hasattr(value, "__dataclass_fields__"):
            pending.extend(vars(value).values())
    return total
