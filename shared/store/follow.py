"""Follow a task's events as they are saved, from any process.

One loop serves every waiter (a stream, a resume, a blocking send): read
the events after the last one seen, by number and a page at a time, then
sleep on the store's watch until something changes. Events are read from
the log itself, never from the wake-up, so none is lost, repeated or
reordered, however the wake-ups fall.

Numbers are contiguous within a log, so a reader knows when it missed
some: the log was trimmed past it (a reader that fell behind, a resume
from long ago), or the store lost its last writes and numbered on from a
new base (see `shared.stores.redis.scripts`). Either way the reader gets the
task as it stands (a `Record`) instead of a silent jump, and goes on
from that task's number; the gap is logged and counted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from shared.events import Event, is_private
from shared.ops.event_metrics import gaps_of
from shared.store.contract import Record, Store
from shared.task import INTERRUPTED_STATES, Task, is_terminal, state_of

log = logging.getLogger(__name__)

# Yielded instead of an event when `idle` seconds pass without one.
IDLE = None
# Events read from the store in one call: a long log never comes back in one reply.
PAGE = 100

# What a follower yields: an event with its number, the task as it stands
# (after a gap), or IDLE.
Followed = tuple[int, Event] | Record | None


class Interrupt(Protocol):
    """Set when whoever follows is gone (a client that hung up)."""

    def is_set(self) -> bool: ...

    def add_waker(self, wake: Callable[[], None]) -> None: ...


def is_final(event: Event) -> bool:
    """The task stopped: terminal, or waiting for the peer."""
    return event["kind"] == "status-update" and bool(event.get("final"))


def is_stopped(task: Task) -> bool:
    """What `is_final` says of an event, said of a task as it stands."""
    state = state_of(task)
    return is_terminal(state) or state in INTERRUPTED_STATES


def follow(
    store: Store,
    task_id: str,
    after: int,
    *,
    deadline: float,
    idle: float = 15.0,
    interrupt: Interrupt | None = None,
    reader: str = "stream",
    nudge: Callable[[], object] | None = None,
) -> Iterator[Followed]:
    """The task's events numbered above `after`, oldest first, as they come;
    the task as it stands (a `Record`) where the log no longer holds the
    next one; `IDLE` after each `idle` seconds of quiet. Ends after a final
    event (or a stopped task), at `deadline` (a `time.monotonic()` value),
    or as soon as `interrupt` is set. `reader` names the follower in the
    gap count. Events kept for the service alone (`shared.events.is_private`)
    are passed over. Raises StoreError when the store cannot be reached.

    With `nudge`, the follower never blocks (an event loop drives it, a
    step at a time on a few threads): where it would wait it yields `IDLE`
    at once, and `nudge` is called, from the waking thread, whenever the
    watch is woken; the caller asks for the next item once nudged (or
    whenever it likes: a spurious ask reads nothing and yields `IDLE`
    again). `idle` then does not apply: keepalives are the caller's."""
    with store.watch(task_id) as watch:
        if interrupt is not None:
            interrupt.add_waker(watch.wake)
        if nudge is not None:
            watch.on_wake(nudge)
        woken = True  # the first read is not waited for
        while True:
            if interrupt is not None and interrupt.is_set():
                return
            # Only when told the task may have moved past `after`: a quiet
            # tick re-reads nothing (the watch misses no change).
            for item in _read(store, task_id, after, reader) if woken else ():
                yield item
                if isinstance(item, Record):
                    after = item.seq
                    if is_stopped(item.task):
                        return
                else:
                    after = item[0]
                    if is_final(item[1]):
                        return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if nudge is not None:
                yield IDLE  # the caller waits to be nudged, then asks again
                woken = watch.wait(0, after)
                continue
            woken = watch.wait(min(idle, remaining), after)
            if not woken and remaining > idle:
                yield IDLE


def _read(
    store: Store, task_id: str, after: int, reader: str
) -> Iterator[tuple[int, Event] | Record]:
    """What the log holds after `after` now, a page at a time; the task as it
    stands in place of events it no longer holds. Ends when the log does,
    or (the caller ends it) after a final event or a stopped task."""
    while True:
        page = store.events(task_id, after, PAGE)
        for seq, event in page:
            if seq != after + 1:
                record = _caught_up(store, task_id, after, seq, reader)
                if record is None:
                    return  # gone (expired) meanwhile: nothing more will come
                if record.seq != after:
                    yield record
                    after = record.seq
                    break  # read on from the task's own number
                # The store's task stands at `after`, yet its log goes on
                # past a hole: no task to offer instead, so the log is it.
                log.warning("task %s: log jumps from %d to %d", task_id, after, seq)
            if not is_private(event):
                yield seq, event
            after = seq
        else:
            if len(page) < PAGE:
                return


def _caught_up(store: Store, task_id: str, after: int, found: int, reader: str) -> Record | None:
    gaps_of(reader).inc()
    record = store.read(task_id)
    log.info(
        "task %s: %s asked for events after %d; the log holds %d next:"
        " sending the task as it stands (event %s) instead",
        task_id,
        reader,
        after,
        found,
        record.seq if record is not None else "none",
    )
    return record
