"""The front end's Celery dispatcher: publishes by task name, imports no worker code.

A client-only Celery app (no result backend, no task modules) sends
`toolnexus.fulfil` with the A2A task id as the Celery task id (the reaper's
resends get ids of their own, `shared.broker.dispatcher.resend_id`); a cancel
needs no lookup either way (`revoke`). Every broker call is bounded: with the
broker down, a peer hears "broker unavailable" within about two seconds
instead of a request hanging on Celery's default retry forever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from celery import Celery

from shared.broker.amqp import CONFIRM_TIMEOUT, amqp_config, is_amqp
from shared.broker.backlog import Backlog, amqp_backlog, sent_at
from shared.broker.dispatcher import CANCEL_COMMAND, FULFIL_TASK
from shared.broker.outbox import OutboxMessage
from shared.broker.redis import broker_transport, celery_broker
from shared.broker.redis_queue import RedisTaskQueue
from shared.errors import BrokerError
from shared.ops.correlation import CELERY_HEADER, request_id
from shared.ops.tracing import publishing
from shared.settings import Settings

log = logging.getLogger(__name__)

CONNECT_TIMEOUT: Final = 1.0
# One quick retry covers a broker restart or a dropped pooled connection;
# more would only keep the peer waiting on a broker that is down.
RETRY_POLICY: Final = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "interval_max": 0.5,
}


# At most this many messages sent from the store's outbox wait for their `enqueue`: each is
# asked for right after the write that sent it, so more means some never were
# (their send failed in between; beat's resend then queues another, which
# only one delivery claims).
MOST_SENT_FROM_OUTBOX: Final = 1024


def _nothing() -> None:
    pass


def _headers(trace_headers: dict[str, str]) -> dict[str, Any]:
    """A fulfilment message's own headers. The worker logs the request id
    beside the task id and continues the trace (worker.engine.observe,
    shared.ops.tracing)."""
    return {CELERY_HEADER: request_id(), **sent_at(), **trace_headers}


class CeleryDispatcher:
    """`on_queued` runs after each message is on the broker: the front end
    passes its counter in at wiring, so this package imports no web code."""

    # Its workers (worker.runtime.app) make room in the turn book as each delivery ends.
    takes_turns = True

    def __init__(self, settings: Settings, *, on_queued: Callable[[], None] = _nothing) -> None:
        self.queue = settings.queue
        self._queues = (settings.queue, settings.push_queue)
        self._on_queued = on_queued
        # Tasks whose message a store's write queued (its outbox), until their
        # `enqueue`, which follows at once.
        self._sent_from_outbox: set[str] = set()
        transport = broker_transport(settings.broker_url)
        timeouts = {
            "socket_connect_timeout": CONNECT_TIMEOUT,
            "socket_timeout": CONNECT_TIMEOUT * 2,
        }
        url, options = celery_broker(settings.broker_url, settings.sentinel_password, timeouts)
        self.app = Celery("toolnexus-web", broker=url, set_as_current=False)
        self.app.conf.update(
            broker_transport=transport,
            broker_connection_timeout=CONNECT_TIMEOUT,
            broker_connection_max_retries=RETRY_POLICY["max_retries"],
            broker_transport_options={**timeouts, **options},
            # Published by the sender, so Flower sees a task from the moment it is queued.
            task_send_sent_event=True,
        )
        if is_amqp(settings.broker_url):
            # The worker's own queue declarations (RabbitMQ refuses a second
            # declaration that differs), with publisher confirms.
            options = self.app.conf.broker_transport_options
            self.app.conf.update(amqp_config((self.queue,), settings.amqp_queue_type, options))
        # On Redis a queue is a list that needs no declaring: the message and
        # its task-sent event go straight to it (shared.broker.redis_queue). Other brokers
        # (RabbitMQ drops a message for an undeclared queue) keep Celery's way.
        self._redis_queue = (
            RedisTaskQueue(
                self.app,
                settings.broker_url,
                self.queue,
                timeout=CONNECT_TIMEOUT,
                sentinel_password=settings.sentinel_password,
            )
            if transport is not None
            else None
        )

    @property
    def redis_server(self) -> tuple[object, ...] | None:
        """The Redis server whose database the broker is (`server_of`); None
        on another broker, or on Sentinel."""
        return self._redis_queue.server if self._redis_queue is not None else None

    def outbox(self, task_id: str, unkept: Callable[[], None] = _nothing) -> OutboxMessage:
        """The task's message, for a store's script on the broker's own server
        to queue with its write (`shared.broker.outbox`). Only where
        `redis_server` names a server."""
        queue = self._redis_queue
        if queue is None:
            raise TypeError("only a Redis broker's messages travel with a store's write")
        # The producer span covers the message's making: its push is the
        # store's script, which follows.
        with publishing(FULFIL_TASK, task_id) as trace_headers:
            message, announcement = queue.envelopes(task_id, _headers(trace_headers))
        return OutboxMessage(
            task_id,
            queue.db,
            queue.queue,
            message,
            queue.event_channel,
            announcement,
            partial(self._went_from_outbox, task_id),
            unkept,
        )

    def _went_from_outbox(self, task_id: str) -> None:
        if len(self._sent_from_outbox) >= MOST_SENT_FROM_OUTBOX:
            self._sent_from_outbox.clear()  # never asked for: a second message is harmless
        self._sent_from_outbox.add(task_id)

    @property
    def sends_in_one_round_trip(self) -> bool:
        """Whether a send is one round trip that never waits for a confirm or
        retries (the direct Redis sender), as a caller on an event loop asks."""
        return self._redis_queue is not None

    def enqueue(self, task_id: str) -> None:
        if self._sent_from_outbox and task_id in self._sent_from_outbox:
            # Queued already, by the store's write that held the task.
            self._sent_from_outbox.discard(task_id)
            self._on_queued()
            return
        try:
            with publishing(FULFIL_TASK, task_id) as trace_headers:
                headers = _headers(trace_headers)
                if self._redis_queue is not None:
                    self._redis_queue.send(task_id, headers)
                else:
                    self._send_task(task_id, headers)
        except Exception as error:  # kombu/redis raise many types; all mean "not queued"
            raise BrokerError(f"broker unavailable: {_reason(error)}") from error
        self._on_queued()

    def _send_task(self, task_id: str, headers: dict[str, Any]) -> None:
        self.app.send_task(
            FULFIL_TASK,
            args=[task_id],
            task_id=task_id,
            # What Flower shows, made here rather than by Celery's saferepr.
            argsrepr=repr([task_id]),
            kwargsrepr="{}",
            retry=True,
            retry_policy=RETRY_POLICY,
            headers=headers,
            queue=self.queue,
            # AMQP with publisher confirms: wait this long for RabbitMQ's ack
            # (Redis ignores it).
            confirm_timeout=CONFIRM_TIMEOUT,
        )

    def revoke(self, task_id: str) -> None:
        try:
            # A message still queued under the task's own id is dropped when it arrives.
            self.app.control.revoke(task_id)
            # Every delivery a worker holds is stopped, whatever Celery id it
            # came under: a resend's, or one a finished copy left unfindable
            # by id (worker.runtime.cancel).
            self.app.control.broadcast(CANCEL_COMMAND, arguments={"task_id": task_id})
        except Exception as error:
            raise BrokerError(f"broker unavailable: {_reason(error)}") from error

    def backlog(self) -> list[Backlog]:
        """Each queue the workers take from (fulfilment, push): its depth and,
        on Redis, its oldest message's age (shared.broker.backlog)."""
        try:
            if self._redis_queue is not None:
                return self._redis_queue.backlog(self._queues)
            with self.app.connection_for_read() as connection:
                return amqp_backlog(_connected(connection), self._queues)
        except Exception as error:
            raise BrokerError(f"broker unavailable: {_reason(error)}") from error

    def check(self) -> None:
        try:
            if self._redis_queue is not None:
                # A pooled connection's round trip: Celery's connection for
                # write is a new connection (and handshake) every time.
                self._redis_queue.ping()
                return
            with self.app.connection_for_write() as connection:
                _connected(connection)
        except Exception as error:
            raise BrokerError(f"broker unavailable: {_reason(error)}") from error

    def close(self) -> None:
        if self._redis_queue is not None:
            self._redis_queue.close()
        self.app.close()


def _reason(error: Any) -> str:
    return f"{type(error).__name__}: {error}"[:200]


def _connected(connection: Any) -> Any:
    """`connection`, connected within the dispatcher's bound (one quick retry)."""
    connection.ensure_connection(
        max_retries=1, interval_start=0, interval_step=0.2, timeout=CONNECT_TIMEOUT * 2
    )
    return connection
