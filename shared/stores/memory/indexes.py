"""Scored indexes (`shared.indexes`) in this process's memory: what the
memory store keeps beside its tasks."""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence


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

    def place(self, member: str, scores: Mapping[str, float | None]) -> None:
        with self._lock:
            for name, score in scores.items():
                if score is None:
                    self._kept.get(name, {}).pop(member, None)
                else:
                    self._kept.setdefault(name, {})[member] = score

    def rescore(self, name: str, members: Sequence[str], score: float) -> None:
        with self._lock:
            index = self._kept.get(name, {})
            for member in members:
                if member in index:
                    index[member] = score

    def score(self, name: str, member: str) -> float | None:
        with self._lock:
            return self._kept.get(name, {}).get(member)

    def range(
        self, name: str, upto: float = math.inf, limit: int | None = None
    ) -> list[tuple[str, float]]:
        with self._lock:
            found = [(s, m) for m, s in self._kept.get(name, {}).items() if s <= upto]
        found.sort()
        return [(member, score) for score, member in found[:limit]]
