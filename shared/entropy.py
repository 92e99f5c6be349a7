"""Random bytes from `os.urandom`, read a block at a time.

Every task, context, message and artifact id is 16 random bytes; one
`getrandom` call per id is a system call on every hot path (a send makes
four). Here the bytes come from one call per block and are handed out in
slices, each exactly once: slices leave a `deque`, whose `popleft` is atomic,
so threads and greenlets never share one. A forked child drops the
parent's unread slices, or parent and child would hand out the same ones.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Final

BLOCK: Final = 4096


class RandomSlices:
    """`size`-byte slices of `os.urandom`, each given out once."""

    def __init__(self, size: int, block: int = BLOCK) -> None:
        self._size = size
        self._per_block = max(1, block // size)
        self._slices: deque[bytes] = deque()
        os.register_at_fork(after_in_child=self._slices.clear)

    def take(self) -> bytes:
        try:
            return self._slices.popleft()
        except IndexError:
            self._refill()
            return os.urandom(self._size)

    def _refill(self) -> None:
        raw = os.urandom(self._size * self._per_block)
        size = self._size
        self._slices.extend(raw[at : at + size] for at in range(0, len(raw), size))
