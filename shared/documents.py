"""Small documents: the store primitive under the features that keep state of
their own beside the tasks (each owner's send limits, to begin with).

A document is a JSON value under a name, changed only by compare-and-set:
`document(name)` reads it with its version and the store's clock, and
`swap(name, version, value, ttl)` writes it only if it is still at that
version. A version is an opaque token drawn afresh at every write, never a
counter, so a document deleted and written again is never mistaken for the
one read before (no ABA). A feature is written once over `step`, which
retries a change until it lands; a backend supplies only the two methods.

Every process on the store shares its documents, by the store's clock
(Redis's `TIME`, PostgreSQL's `clock_timestamp()`, the process's clock for
the memory and file stores), so processes whose clocks disagree still agree
on a document's times.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from shared.errors import StoreError

R = TypeVar("R")

# The version of a document that is not there (never written, deleted, expired).
ABSENT: Final = ""
# Swaps lost to other writers before `step` gives up: far more than contention
# between the processes of one deployment on one document reaches.
ATTEMPTS: Final = 200
# The pause after a lost swap, doubled after each (at random up to it, so
# that the losers of one round do not meet again in the next).
PAUSE: Final = 0.001
PAUSE_MAX: Final = 0.05


def new_version() -> str:
    """A fresh version token."""
    return secrets.token_hex(8)


@dataclass(frozen=True)
class Document:
    """A document as read: `value` None (and `version` ABSENT) when it is not
    there; `now` is the store's clock at the read, in seconds since the epoch."""

    version: str
    value: Any
    now: float


class Documents(Protocol):
    """A store's small documents. Names are the features' own (a fixed
    prefix and a digest), never a client's raw text."""

    def document(self, name: str) -> Document: ...

    def swap(self, name: str, version: str, value: Any, ttl: float | None = None) -> bool:
        """Write `value` (None deletes the document) if the document is still
        at `version` (ABSENT: still not there); True when written. With
        `ttl`, the document is gone `ttl` seconds after this write."""


# A change: from the document's value (None: not there) and the store's
# clock, the value to write (the same object: nothing to write), the time
# it lives for (None: for good) and what the step returns.
Change = Callable[[Any, float], tuple[Any, float | None, R]]


def step(documents: Documents, name: str, change: Change[R]) -> R:
    """Apply `change` to the document as one atomic step among every process
    on the store: read, change, compare-and-set, again from the read when
    another writer came first. What `change` returns when its value is the
    one it was given is returned at once, with nothing written."""
    pause = PAUSE
    for _ in range(ATTEMPTS):
        found = documents.document(name)
        value, ttl, result = change(found.value, found.now)
        if value is found.value:
            return result
        if documents.swap(name, found.version, value, ttl):
            return result
        time.sleep(random.uniform(0, pause))
        pause = min(pause * 2, PAUSE_MAX)
    raise StoreError(
        f"task store: the document {name!r} changed under {ATTEMPTS} attempts in a row",
        "the store is too busy",
    )
