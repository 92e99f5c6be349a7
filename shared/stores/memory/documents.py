"""Small documents (`shared.documents`) in this process's memory, by
the store's clock: what the memory store keeps beside its tasks."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from shared.codec import copied
from shared.documents import ABSENT, Document, new_version


class MemoryDocuments:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        # name -> (version, value, when it expires or None)
        self._kept: dict[str, tuple[str, Any, float | None]] = {}

    def document(self, name: str) -> Document:
        with self._lock:
            now = self._clock()
            version, value = self._current(name, now)
        return Document(version, copied(value)[0], now)

    def swap(self, name: str, version: str, value: Any, ttl: float | None = None) -> bool:
        stored = copied(value)[0]
        with self._lock:
            now = self._clock()
            if self._current(name, now)[0] != version:
                return False
            if stored is None:
                self._kept.pop(name, None)
            else:
                self._kept[name] = (new_version(), stored, None if ttl is None else now + ttl)
        return True

    def forget_expired(self) -> None:
        """Drop the documents past their time (a read already skips them)."""
        with self._lock:
            now = self._clock()
            for name in [n for n, kept in self._kept.items() if _gone(kept[2], now)]:
                del self._kept[name]

    def _current(self, name: str, now: float) -> tuple[str, Any]:
        """Under the lock: the document's version and value, an expired one gone."""
        kept = self._kept.get(name)
        if kept is None:
            return ABSENT, None
        version, value, expires = kept
        if _gone(expires, now):
            del self._kept[name]
            return ABSENT, None
        return version, value


def _gone(expires: float | None, now: float) -> bool:
    return expires is not None and expires <= now
