"""RabbitMQ (AMQP 0-9-1) as the broker: the queues both Celery apps declare alike.

The front end's dispatcher, the workers, beat and Flower must declare each
queue with the same arguments, or RabbitMQ refuses the second declaration
(PRECONDITION_FAILED), so they all take them from here.

- Quorum queues by default: replicated, durable, and a message a consumer
  has not acknowledged is redelivered when its channel closes (a dead
  worker), whatever the time. `classic` (TOOLNEXUS_AMQP_QUEUE_TYPE) keeps
  a single-node durable queue, for a server without quorum support.
- Each queue hangs off a topic exchange of its own name: with quorum
  queues Celery delays a countdown (a store-outage retry, the recheck of a
  redelivered task) through RabbitMQ's native delayed delivery, which
  cannot route through a direct exchange; the worker would otherwise hold
  the delayed message unacknowledged in its one prefetch slot.
- Publisher confirms: the front end hands a peer its task id only after
  RabbitMQ has taken the message, within CONFIRM_TIMEOUT.
- Every blocking read and write of a connection gives up after
  SOCKET_TIMEOUT: with confirms on, Celery's own publishes (a worker's task
  events, a retry) wait for RabbitMQ's answer with no time limit of their
  own, and on a connection lost without a word (a partition, a middlebox
  dropping it) a worker's main loop waited there for good, consuming
  nothing, its heartbeats unsent.
- Each worker's remote-control queue (Celery's pidbox) is not exclusive:
  RabbitMQ keeps a connection lost without a word until it misses its
  heartbeats, and an exclusive queue stays locked to it meanwhile, so a
  worker that reconnected at once failed to declare its own queue again
  (RESOURCE_LOCKED) and exited. The queue still goes once unused (auto
  delete, and 10 s of expiry).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from kombu.entity import Exchange, Queue

from shared.settings import AMQP_QUEUE_TYPES

AMQP_SCHEMES: Final = frozenset({"amqp", "amqps", "pyamqp"})
# Seconds a publish waits for RabbitMQ's confirm before it counts as failed.
CONFIRM_TIMEOUT: Final = 2.0
# Seconds a blocking read or write of a connection waits before giving up.
SOCKET_TIMEOUT: Final = 4.0


def is_amqp(broker_url: str) -> bool:
    return broker_url.partition("://")[0].lower() in AMQP_SCHEMES


def amqp_queues(names: Iterable[str], queue_type: str) -> tuple[Queue, ...]:
    """Durable queues of `queue_type`, each bound to its own topic exchange."""
    if queue_type not in AMQP_QUEUE_TYPES:
        raise ValueError(f"queue type {queue_type!r}: use {' or '.join(AMQP_QUEUE_TYPES)}")
    arguments = {"x-queue-type": queue_type}
    return tuple(
        Queue(  # type: ignore[no-untyped-call]
            name,
            Exchange(name, type="topic", durable=True),  # type: ignore[no-untyped-call]
            routing_key=name,
            durable=True,
            queue_arguments=arguments,
        )
        for name in names
    )


def amqp_config(
    names: Iterable[str], queue_type: str, transport_options: dict[str, Any]
) -> dict[str, Any]:
    """The Celery settings an AMQP broker adds (to `transport_options`), for
    the front end and the worker alike."""
    return {
        "task_queues": amqp_queues(names, queue_type),
        "broker_transport_options": {
            **transport_options,
            "confirm_publish": True,
            "read_timeout": SOCKET_TIMEOUT,
            "write_timeout": SOCKET_TIMEOUT,
        },
        # Quorum queues have no global QoS: Celery then sets the prefetch per
        # consumer (worker_prefetch_multiplier x concurrency), as it should.
        "worker_detect_quorum_queues": True,
        "control_queue_exclusive": False,
        "broker_native_delayed_delivery_queue_type": queue_type,
    }
