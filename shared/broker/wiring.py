"""The one place a dispatcher's abilities are read: what it can do beyond
`shared.broker.dispatcher.Dispatcher`, decided when the front end wires
itself, never asked again."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from shared.broker.backlog import BacklogSource
from shared.broker.outbox import OutboxMaker


@dataclass(frozen=True)
class DispatcherAbilities:
    """What a dispatcher can do beyond `Dispatcher`, read once here: the
    front end takes these at its wiring and never asks the dispatcher again.

    `takes_turns`: its workers make room in the turn book as their
    deliveries end (`shared.owners.turns`): this project's Celery workers
    and in-process threads do; any other dispatcher (a user's, a test's) is
    handed every task at once, in arrival order, since nothing behind it
    would give a held task its turn. `backlog`: where `/metrics` reads the
    queues' backlog, None where it cannot tell. `outbox`: how it makes a
    task's message to go with a store's write on its own Redis server
    (`shared.broker.outbox`), and `redis_server` that server. `in_process`:
    its workers are threads of this very process (the embedded server's), so
    no broker stands behind it and `/readyz` names those workers instead."""

    takes_turns: bool = False
    backlog: BacklogSource | None = None
    outbox: OutboxMaker | None = None
    redis_server: tuple[object, ...] | None = None
    in_process: bool = False


def dispatcher_abilities(dispatcher: object) -> DispatcherAbilities:
    """The dispatcher's abilities, by what it has. A wrapper that passes its
    calls on to the dispatcher it holds as `inner` (counting them, say) has
    that one's abilities, but for `outbox`, which would skip its own enqueue.
    `outbox` is read on the class, for the same reason."""
    inner = getattr(dispatcher, "inner", None)
    if inner is not None:
        wrapped = dispatcher_abilities(inner)
        return DispatcherAbilities(
            wrapped.takes_turns, wrapped.backlog, in_process=wrapped.in_process
        )
    outbox = getattr(type(dispatcher), "outbox", None)
    return DispatcherAbilities(
        takes_turns=bool(getattr(dispatcher, "takes_turns", False)),
        in_process=bool(getattr(dispatcher, "in_process", False)),
        backlog=dispatcher if isinstance(dispatcher, BacklogSource) else None,
        outbox=partial(outbox, dispatcher) if callable(outbox) else None,
        redis_server=getattr(dispatcher, "redis_server", None) if callable(outbox) else None,
    )
