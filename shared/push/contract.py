"""Webhook configs, delivery cursors and leases, kept beside their task.

A task's push configs live in the same store as the task (the same Redis
and key prefix, the same directory, the same process's memory), so they
survive what the task survives. For each (task, config) the store keeps:

- the config itself (`PushConfig`, the stored shape below);
- a `Cursor`: the number of the last event the receiver answered 2xx to,
  plus the retry state of the next one (failures so far, since when);
- a lease: which delivery holds the pair, until when (a worker that died
  holding one simply lets it run out; the sweep then hands the pair on).
  The sweep only *books* a free pair for the message it sends (`book`);
  the first delivery to run takes the pair (`lease`) over any booking, its
  own or another's, so a message that waited in the queue longer than a
  booking lasts still delivers (docs/push.md, "Leases and bookings").

`pushing()` lists the tasks that may still have something to deliver: a
task enters with its first config and leaves once it is terminal and every
cursor stands at its last event. What is *due* needs no marker of its own:
a commit's own event number, beyond a cursor, is the due record, written in
the same atomic step as the commit by construction.

This module is the contract; it imports nothing of the task store's. It is
written once (`shared.push.documents`) over the primitives every built-in
store has (small documents and scored indexes), and each store makes it on
first use (`Store.push_store`), once per store; a user's two-method store
keeps none (see `shared.store.adapter`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypedDict

from shared.errors import ToolnexusError

if TYPE_CHECKING:
    from collections.abc import Callable, Collection


class Authentication(TypedDict):
    scheme: str
    credentials: str


class PushConfig(TypedDict, total=False):
    id: str
    taskId: str
    url: str
    token: str
    authentication: Authentication
    version: str  # the dialect that made it: which StreamResponse shape it gets


class TooManyConfigs(ToolnexusError):
    """A task already holds as many push configs as it may."""


@dataclass(frozen=True)
class Cursor:
    delivered: int = 0  # the last event answered with a 2xx
    failures: int = 0  # failed attempts at the next one
    since: float = 0.0  # when its first attempt failed
    given_up: int = 0  # events given up so far


# What a booked lease's holder is stored as, so one lease field says both who
# holds the pair and whether that delivery runs yet (a running one's holder
# is stored as it is: a uuid's hex, never starting so).
BOOKED = "booked:"


def gives_way(current: str, holder: str) -> bool:
    """Whether a lease `current` holds, not run out, gives way to `holder`'s
    running delivery: its own, or a booking of a message not yet run."""
    return current == holder or current.startswith(BOOKED)


class PushStore(Protocol):
    def put(self, config: PushConfig, cap: int) -> None:
        """Save (or replace, by id) a config; TooManyConfigs beyond `cap`."""

    def config(self, task_id: str, config_id: str) -> PushConfig | None: ...

    def configs(self, task_id: str) -> list[PushConfig]:
        """The task's configs, ordered by id."""

    def delete(self, task_id: str, config_id: str) -> bool: ...

    def cursor(self, task_id: str, config_id: str) -> Cursor: ...

    def set_cursor(self, task_id: str, config_id: str, cursor: Cursor) -> None: ...

    def book(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        """Book a free pair (no lease, or one run out) for `holder`, a delivery
        sent but not yet running: True when booked."""

    def lease(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        """Take or renew the pair for `holder`, a running delivery: True unless
        another running delivery holds it (a booking, anyone's, gives way)."""

    def release(self, task_id: str, config_id: str, holder: str) -> None: ...

    def pushing(self) -> list[str]: ...

    def done(self, task_id: str, checked: Collection[str] | None = None) -> bool:
        """The task is finished and delivered (to the configs `checked`, where
        given): no longer swept, unless a config not among them came
        meanwhile (then False, and it is still swept)."""

    def forget(self, task_id: str) -> None:
        """Everything of the task's push state (the task expired)."""


class Once:
    """A store's push state, made on first use and then the same object (so
    the take-over of an earlier version's push state runs once a process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: PushStore | None = None

    def get(self, make: Callable[[], PushStore]) -> PushStore:
        with self._lock:
            if self._made is None:
                self._made = make()
            return self._made
