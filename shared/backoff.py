"""Exponential backoff: the one helper for every retry loop."""

from __future__ import annotations


class Backoff:
    """Delays that double from `initial` up to `cap`; `reset` starts over."""

    def __init__(self, *, initial: float = 0.05, cap: float = 2.0) -> None:
        self._initial = initial
        self._cap = cap
        self._next = initial

    def next(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._cap)
        return delay

    def reset(self) -> None:
        self._next = self._initial
