"""What waits in the broker: each queue's depth and how long its oldest message has waited.

An autoscaler scales the workers on these (docs/deployment.md): the depth
says how much work no worker has taken yet, the oldest age how late the
next task to start already is. Both are read from the broker at the moment
they are asked for, so every front end reports the same fleet-wide figures.

Every message the service publishes carries the time it was sent in the
`SENT_AT` header. On Redis a queue is a list whose oldest message is its
last element (kombu pushes on the left and pops on the right), so its age
is one read away. RabbitMQ tells a queue's depth on a passive declare but
shows no message without delivering it, so there the age is unknown and
not reported (RabbitMQ's own exporter and KEDA's RabbitMQ scaler read the
depth the same way).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

import redis

# The message header holding the Unix time the message was published.
SENT_AT: Final = "toolnexus_sent_at"
# kombu's Redis transport keeps a queue's messages of priority p > 0 in a
# list of their own, named `<queue><sep><p>`, for each of its default steps.
_PRIORITY_SEPARATOR: Final = "\x06\x16"
_PRIORITY_STEPS: Final = (3, 6, 9)


@dataclass(frozen=True)
class Backlog:
    queue: str
    depth: int
    # Seconds since the oldest waiting message was sent; None when the queue
    # is empty or the broker does not show it.
    oldest_age: float | None = None


@runtime_checkable
class BacklogSource(Protocol):
    def backlog(self) -> list[Backlog]:
        """Each queue's backlog now; raise BrokerError if the broker cannot say."""


def sent_at() -> dict[str, float]:
    """The header that dates a message as it is published."""
    return {SENT_AT: time.time()}


def redis_backlog(client: redis.Redis, queues: Sequence[str]) -> list[Backlog]:
    """The backlog of each queue on a Redis broker, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        for name in (queue, *(f"{queue}{_PRIORITY_SEPARATOR}{step}" for step in _PRIORITY_STEPS)):
            pipe.llen(name)
        pipe.lindex(queue, -1)
    replies = pipe.execute()
    now = time.time()
    found = []
    width = 1 + len(_PRIORITY_STEPS) + 1
    for index, queue in enumerate(queues):
        *lengths, oldest = replies[index * width : (index + 1) * width]
        sent = _sent_at(oldest)
        age = None if sent is None else max(0.0, now - sent)
        found.append(Backlog(queue, sum(int(n) for n in lengths), age))
    return found


def _sent_at(envelope: bytes | None) -> float | None:
    """The SENT_AT header of a message as kombu's Redis transport stores it."""
    if envelope is None:
        return None
    try:
        message: Any = json.loads(envelope)
        value = message["headers"].get(SENT_AT)
        return float(value) if value is not None else None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None  # not a message of this service's: its age is unknown


def amqp_backlog(connection: Any, queues: Sequence[str]) -> list[Backlog]:
    """The depth of each queue on RabbitMQ: the messages ready to deliver, as
    a passive declare counts them (those delivered and not yet acknowledged
    are being worked on and not counted). A queue no worker has declared yet
    holds nothing."""
    from amqp.exceptions import NotFound

    found = []
    for queue in queues:
        # A passive declare of a missing queue closes its channel: one each.
        channel = connection.channel()
        try:
            _, ready, _ = channel.queue_declare(queue=queue, passive=True)
        except NotFound:
            ready = 0
        finally:
            with contextlib.suppress(Exception):
                channel.close()
        found.append(Backlog(queue, int(ready)))
    return found
