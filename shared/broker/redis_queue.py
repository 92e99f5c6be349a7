"""Fulfilment messages sent straight to a Redis broker: one round trip, no producer.

Celery's send (kombu's producer, its connection retry wrapper, the task-sent
event through a second producer) costs the front end more CPU per SendMessage
than the rest of the request, and two round trips to the broker. On Redis a
queue is a list and an event is a PUBLISH, so this sends both in one
pipelined round trip instead. Celery itself still makes the message and the
event (`as_task_v2`, `Event`, its Lamport clock); only kombu's Redis envelope
is written here, the JSON a `celery worker` pops from the list, and
tests/test_redis_queue.py compares it with what kombu writes, so an upgrade
that changes either side fails there first.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import redis
from celery import Celery
from celery.events import Event
from celery.utils.nodenames import anon_nodename
from celery.utils.time import utcoffset
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from shared.broker.backlog import Backlog, redis_backlog
from shared.broker.dispatcher import FULFIL_TASK
from shared.codec import encode_bytes
from shared.pooling import POOL_WAIT
from shared.redis_nodes.pools import blocking_pool, db_of, forget_idle, server_of
from shared.task import new_id

# What Celery's task-sent events travel on (its event exchange and routing key).
EVENT_EXCHANGE: Final = "celeryev"
SENT_ROUTING_KEY: Final = "task.sent"
# The task message is persistent, the event transient (kombu's delivery modes).
PERSISTENT: Final = 2
TRANSIENT: Final = 1
# Pooled connections per process: a send holds one for one round trip.
POOL_SIZE: Final = 64


class RedisTaskQueue:
    """Sends `FULFIL_TASK` messages for task ids to one queue of a Redis broker."""

    def __init__(
        self,
        app: Celery,
        broker_url: str,
        queue: str,
        *,
        timeout: float,
        sentinel_password: str | None = None,
    ) -> None:
        self._app = app
        self.queue = queue
        self._origin_name, self._origin_pid = "", -1
        self._reply_to = app.thread_oid
        pool = blocking_pool(
            broker_url,
            max_connections=POOL_SIZE,
            timeout=max(POOL_WAIT, timeout),
            sentinel_password=sentinel_password,
            socket_connect_timeout=timeout,
            socket_timeout=timeout * 2,
            # One quick retry covers a broker restart or a dropped pooled
            # connection; a repeated message is harmless (only one delivery
            # claims the task, see worker.engine.fulfil).
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.2), 1),
            retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        )
        self._client = redis.Redis(connection_pool=pool)
        # kombu's fanout prefix names the database, so that workers on other
        # databases of the same server do not hear these events.
        self.db = db_of(pool)
        self.event_channel = f"/{self.db}.{EVENT_EXCHANGE}/{SENT_ROUTING_KEY}"
        self.server = server_of(pool)

    def send(self, task_id: str, headers: dict[str, Any]) -> None:
        """Queue the task's message and announce it, in one round trip; raises
        redis errors as they come (the caller reports the broker unavailable)."""
        message, announcement = self.envelopes(task_id, headers)
        pipe = self._client.pipeline(transaction=False)
        pipe.lpush(self.queue, message)
        pipe.publish(self.event_channel, announcement)
        with self._silent_dropped():
            pipe.execute()

    def envelopes(self, task_id: str, headers: dict[str, Any]) -> tuple[bytes, bytes]:
        """The task's message for the queue and its task-sent event, as sent."""
        origin = self._origin()
        task_headers, properties, body, sent = self._app.amqp.as_task_v2(
            task_id,
            FULFIL_TASK,
            args=[task_id],
            # What Flower shows, made here rather than by Celery's saferepr.
            argsrepr=repr([task_id]),
            kwargsrepr="{}",
            reply_to=self._reply_to,
            origin=origin,
            ignore_result=None,  # as Celery's send_task leaves it: the task decides
            create_sent_event=True,
        )
        task_headers.update(headers)
        route = {"exchange": "", "routing_key": self.queue}
        message = _envelope(
            body,
            task_headers,
            {**properties, "delivery_mode": PERSISTENT, "delivery_info": route},
        )
        event = Event(
            "task-sent",
            sent,
            hostname=origin,
            utcoffset=utcoffset(),
            pid=os.getpid(),
            clock=self._app.clock.forward(),
            queue=self.queue,
            **route,
        )
        announcement = _envelope(
            event,
            {"hostname": origin},
            {
                "delivery_mode": TRANSIENT,
                "delivery_info": {"exchange": EVENT_EXCHANGE, "routing_key": SENT_ROUTING_KEY},
            },
        )
        return message, announcement

    def backlog(self, queues: Sequence[str]) -> list[Backlog]:
        """The backlog of these queues on this broker (shared.broker.backlog)."""
        return redis_backlog(self._client, queues)

    def _origin(self) -> str:
        """This process's Celery node name (gen<pid>@<host>), made again after a fork."""
        pid = os.getpid()
        if self._origin_pid != pid:
            self._origin_name, self._origin_pid = anon_nodename(), pid
        return self._origin_name

    def ping(self) -> None:
        """Whether the broker answers now: raises redis errors as they come."""
        with self._silent_dropped():
            self._client.ping()

    @contextmanager
    def _silent_dropped(self) -> Iterator[None]:
        try:
            yield
        except redis.TimeoutError:
            forget_idle(self._client.connection_pool)
            raise

    def close(self) -> None:
        # The client was given its pool, so closing the client would leave it open.
        self._client.connection_pool.disconnect()


def _envelope(body: Any, headers: dict[str, Any], properties: dict[str, Any]) -> bytes:
    """A message as kombu's Redis transport stores it: the JSON body in base64,
    its headers, and its properties with a fresh delivery tag."""
    return encode_bytes(
        {
            "body": base64.b64encode(encode_bytes(body)).decode("ascii"),
            "content-encoding": "utf-8",
            "content-type": "application/json",
            "headers": headers,
            "properties": {
                **properties,
                "priority": 0,
                "body_encoding": "base64",
                "delivery_tag": new_id(),
            },
        }
    )
