"""Scored indexes (`shared.indexes`) in this process's memory: what the
memory store keeps beside its tasks."""

from __future__ import annotations

import math
import threading


class MemoryIndexes:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, dict[str, float]] = {}  # name -> member -> score

    def add(self, name: str, member: str, score: float) -> None:
        with self._lock:
            self._kept.setdefault(name, {})[member] = score

    def remove(self, name: str, *members: str) -> None:
        with self._lock:
            index = self._kept.get(name, {})
            for member in members:
                index.pop(member, None)

    def range(
        self, name: str, upto: float = math.inf, limit: int | None = None
    ) -> list[tuple[str, float]]:
        with self._lock:
            found = [(s, m) for m, s in self._kept.get(name, {}).items() if s <= upto]
        found.sort()
        return [(member, score) for score, member in found[:limit]]
