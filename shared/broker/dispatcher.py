"""How the front end hands work to workers without importing them.

The web process enqueues by task *name*, so it needs none of the agent's
dependencies; the Celery worker registers a task under the same name, and
the embedded launcher supplies an in-process dispatcher instead.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import partial
from typing import Final, Protocol

from shared.broker.along import SendsAlong
from shared.broker.backlog import BacklogSource

FULFIL_TASK = "toolnexus.fulfil"
REAP_TASK = "toolnexus.reap_stale"
PUSH_TASK = "toolnexus.push"  # one delivery run for a (task, webhook)
PUSH_SWEEP_TASK = "toolnexus.push_sweep"  # run by beat itself, like the reaper
# The workers' remote control command that stops every delivery of a task (worker.runtime.cancel).
CANCEL_COMMAND = "toolnexus_cancel"
RESEND_MARK: Final = "-resend-"


def resend_id(task_id: str) -> str:
    """The Celery id of another message for `task_id` (the reaper's resends).

    The first message goes under the task's own id; a copy under the same id
    would share the entry Celery's worker keeps each message under, and
    finishing as a no-op it would take the running one's entry with it, so a
    revoke would no longer find that one. Starting with the task id, a resend
    is listed beside the first message in Flower and named as a resend.
    """
    return f"{task_id}{RESEND_MARK}{uuid.uuid4().hex[:12]}"


class Dispatcher(Protocol):
    def enqueue(self, task_id: str) -> None:
        """Queue fulfilment of a saved task; raise BrokerError if it cannot."""

    def revoke(self, task_id: str) -> None:
        """Best effort: stop a queued or running fulfilment of a canceled task."""

    def check(self) -> None:
        """Raise BrokerError when work could not be enqueued right now."""


@dataclass(frozen=True)
class DispatcherAbilities:
    """What a dispatcher can do beyond `Dispatcher`, read once here: the
    front end takes these at its wiring and never asks the dispatcher again.

    `takes_turns`: its workers make room in the turn book as their
    deliveries end (`shared.owners.turns`): this project's Celery workers
    and in-process threads do; any other dispatcher (a user's, a test's) is
    handed every task at once, in arrival order, since nothing behind it
    would give a held task its turn. `backlog`: where `/metrics` reads the
    queues' backlog, None where it cannot tell. `along`: how it makes a
    task's message to go with a store's write on its own Redis server
    (`shared.broker.along`), and `redis_server` that server."""

    takes_turns: bool = False
    backlog: BacklogSource | None = None
    along: SendsAlong | None = None
    redis_server: tuple[object, ...] | None = None


def dispatcher_abilities(dispatcher: object) -> DispatcherAbilities:
    """The dispatcher's abilities, by what it has. A wrapper that passes its
    calls on to the dispatcher it holds as `inner` (counting them, say) has
    that one's abilities, but for `along`, which would skip its own enqueue.
    `along` is read on the class, for the same reason."""
    inner = getattr(dispatcher, "inner", None)
    if inner is not None:
        wrapped = dispatcher_abilities(inner)
        return DispatcherAbilities(wrapped.takes_turns, wrapped.backlog)
    along = getattr(type(dispatcher), "along", None)
    return DispatcherAbilities(
        takes_turns=bool(getattr(dispatcher, "takes_turns", False)),
        backlog=dispatcher if isinstance(dispatcher, BacklogSource) else None,
        along=partial(along, dispatcher) if callable(along) else None,
        redis_server=getattr(dispatcher, "redis_server", None) if callable(along) else None,
    )


def is_resend(celery_id: str, task_id: str) -> bool:
    """Whether the message with `celery_id` for `task_id` is one of the reaper's resends."""
    return celery_id.startswith(task_id + RESEND_MARK)
