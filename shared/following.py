"""Follow a task's events as they are saved, from any process.

One loop serves every waiter (a stream, a blocking send): read the events
after the last one seen, by number, then sleep on the store's watch until
something changes. Events are read from the log itself, never from the
wake-up, so none is lost, repeated or reordered, however the wake-ups fall.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Protocol

from shared.events import Event
from shared.store import EventStore

# Yielded instead of an event when `idle` seconds pass without one.
IDLE = None


class Interrupt(Protocol):
    """Set when whoever follows is gone (a client that hung up)."""

    def is_set(self) -> bool: ...

    def add_waker(self, wake: Callable[[], None]) -> None: ...


def is_final(event: Event) -> bool:
    """The task stopped: terminal, or waiting for the peer."""
    return event["kind"] == "status-update" and bool(event.get("final"))


def follow(
    store: EventStore,
    task_id: str,
    after: int,
    *,
    deadline: float,
    idle: float = 15.0,
    interrupt: Interrupt | None = None,
) -> Iterator[tuple[int, Event] | None]:
    """The task's events numbered above `after`, oldest first, as they come;
    `IDLE` after each `idle` seconds of quiet. Ends after a final event, at
    `deadline` (a `time.monotonic()` value), or as soon as `interrupt` is
    set. Raises StoreError when the store cannot be reached."""
    with store.watch(task_id) as watch:
        if interrupt is not None:
            interrupt.add_waker(watch.wake)
        while True:
            if interrupt is not None and interrupt.is_set():
                return
            for seq, event in store.events(task_id, after):
                yield seq, event
                after = seq
                if is_final(event):
                    return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if not watch.wait(min(idle, remaining)) and remaining > idle:
                yield IDLE
