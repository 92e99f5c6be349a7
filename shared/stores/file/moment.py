"""The latest moment a listing of the file store is read as of, shared by
every process on the directory (see `shared.store.listing`).

A write reads it holding `.locks/listed` shared, and saves a status stamped
at or before it stamped just after it instead (`shared.store.listing.
stamped_after`); a listing raises it holding the lock alone before it reads
any task. So a write either sees the listing's moment or was saved before
the listing read anything. The lock file holds the moment itself: eight
bytes, a double, written in one `pwrite`.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from shared.stores.file.locking import flock_within, unlock
from shared.stores.file.log import open_no_link

_MOMENT = struct.Struct("<d")


class ListingMoment:
    """The moment, and the listing gate in front of it: a write passes through
    `.locks/listing` (shared, let go at once) before it takes the moment
    shared, and a listing holds the gate alone while it waits for the
    moment. Writes that overlap one another would otherwise keep the moment
    shared for ever, and a listing waiting for it alone would give up; with
    the gate, new writes wait for the listing's short hold, and the
    writes in flight finish."""

    def __init__(self, locks: Path) -> None:
        self._path = locks / "listed"
        self._gate = locks / "listing"

    @contextmanager
    def pinned(self) -> Iterator[float]:
        """The moment, with no listing able to raise it until the block ends."""
        with self._through_gate(shared=True):
            pass  # passed through: a listing waiting now goes first
        fd = open_no_link(self._path, os.O_RDWR | os.O_CREAT)
        try:
            flock_within(fd, self._path, shared=True)
            yield _read(fd)
        finally:
            unlock(fd)

    def raise_to(self, as_of: float) -> None:
        """Make `as_of` the moment, unless a later one already is: every write
        in flight finishes first, every later one sees it."""
        fd = open_no_link(self._path, os.O_RDWR | os.O_CREAT)
        try:
            if _read(fd) >= as_of:
                return  # raised by a listing whose writes in flight are done
            with self._through_gate(shared=False):  # no new write starts meanwhile
                flock_within(fd, self._path)
            if _read(fd) < as_of:
                os.pwrite(fd, _MOMENT.pack(as_of), 0)
        finally:
            unlock(fd)

    @contextmanager
    def _through_gate(self, *, shared: bool) -> Iterator[None]:
        """The block with the listing gate held."""
        gate = open_no_link(self._gate, os.O_RDWR | os.O_CREAT)
        try:
            flock_within(gate, self._gate, shared=shared)
            yield
        finally:
            unlock(gate)


def _read(fd: int) -> float:
    data = os.pread(fd, _MOMENT.size, 0)
    return float(_MOMENT.unpack(data)[0]) if len(data) == _MOMENT.size else 0.0
