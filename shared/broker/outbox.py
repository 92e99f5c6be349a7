"""The store's outbox: a fulfilment message that travels with the write
that holds its task, and goes to the broker in the same atomic step.

Where the broker is a database of the store's own Redis server, a send's
create (which holds the task in the turn book and takes what has its turn)
keeps the task's message with the book, and whichever step of the book
takes the task puts it on the broker's list in the same script: the send's
own, when the task has room at once (one round trip for the send, not one
for the store and another for the broker), or, while the fleet is full,
the release in the last write of the delivery that makes room (the worker
then publishes nothing). No task is taken without its message. Decided
once at wiring, by comparing the two pools' servers
(`shared.redis_nodes.pools.server_of`).

A kept message costs the store about 1.6 KB while its task waits, so
messages are kept only while the book holds fewer than `KEEP_MOST` tasks,
and each for at most `KEEP_FOR` seconds: a task taken without one is
published by the process that took it, as on any other broker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final, Protocol

# Messages are kept while the book holds fewer tasks than this.
KEEP_MOST: Final = 10_000
# Seconds a kept message lasts: a bound on one whose task left the book by
# a path that did not take or release it.
KEEP_FOR: Final = 86_400


@dataclass(frozen=True)
class OutboxMessage:
    """`message` for the list `queue` on database `db` of the store's server,
    and `announcement` (Celery's task-sent event) for `channel`. The store
    calls `sent()` once its script has pushed both; the dispatcher then
    counts the message as queued, and does not send it again. Kept for a
    later step where the book held the task (`KEEP_MOST`, `KEEP_FOR`); the
    store calls `unkept()` when it neither queued nor kept it."""

    task_id: str
    db: int
    queue: str
    message: bytes
    channel: str
    announcement: bytes
    sent: Callable[[], None]
    unkept: Callable[[], None]

    def script_args(self) -> list[str | int | bytes]:
        """The script's arguments for it (`lua/create_held.lua`)."""
        return [
            self.task_id,
            self.db,
            self.queue,
            self.message,
            self.channel,
            self.announcement,
            KEEP_MOST,
            KEEP_FOR,
        ]


class OutboxMaker(Protocol):
    """A dispatcher's `outbox`: a task's message made to go with a store's write."""

    def __call__(self, task_id: str, unkept: Callable[[], None]) -> OutboxMessage: ...


def outbox_for(
    store_server: tuple[object, ...] | None,
    outbox: OutboxMaker | None,
    broker_server: tuple[object, ...] | None,
    unkept: Callable[[], None],
) -> Callable[[str], OutboxMessage] | None:
    """How the dispatcher makes a task's message to go with the store's write
    (`outbox`), where the store and the broker are databases of one Redis
    server; else None. `unkept()` is called for a message the store neither
    queued nor kept (the book past `KEEP_MOST`)."""
    if outbox is None or store_server is None or store_server != broker_server:
        return None
    return partial(outbox, unkept=unkept)
