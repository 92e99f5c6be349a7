"""A fulfilment message that travels with the write that holds its task.

Where the broker is a database of the store's own Redis server, a send's
create (which holds the task in the turn book and takes what has its turn)
can put the task's message on the broker's list in the same script, when
the book took that very task: one round trip for the send, not one for the
store and another for the broker, and the task is never saved and taken
without its message. Decided once at wiring, by comparing the two pools'
servers (`shared.redis_nodes.pools.server_of`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast


@dataclass(frozen=True)
class QueuedAlong:
    """`message` for the list `queue` on database `db` of the store's server,
    and `announcement` (Celery's task-sent event) for `channel`. The store
    calls `sent()` once its script has pushed both; the dispatcher then
    counts the message as queued, and does not send it again."""

    task_id: str
    db: int
    queue: str
    message: bytes
    channel: str
    announcement: bytes
    sent: Callable[[], None]

    def script_args(self) -> list[str | int | bytes]:
        """The script's arguments for it (`lua/create_held.lua`)."""
        return [self.task_id, self.db, self.queue, self.message, self.channel, self.announcement]


class _SendsAlong(Protocol):
    def along(self, task_id: str) -> QueuedAlong: ...


def along_with(store: object, dispatcher: object) -> Callable[[str], QueuedAlong] | None:
    """How the dispatcher makes a task's message to go with the store's write
    (`dispatcher.along`), where both name the same Redis server
    (`redis_server`); else None. Read on their classes, as `create_held`
    is: a wrapper passing unknown names on to what it wraps does not qualify."""
    if getattr(type(store), "redis_server", None) is None:
        return None
    server = getattr(store, "redis_server", None)
    if server is None or getattr(type(dispatcher), "along", None) is None:
        return None
    if server != getattr(dispatcher, "redis_server", None):
        return None
    return cast(_SendsAlong, dispatcher).along
