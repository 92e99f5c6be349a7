"""Give back work the broker lost or a dead worker was holding.

Two cases, both checked by beat on every reap (the claim's compare-and-set
makes any duplicate message harmless):

1. A delivery a dead worker received but never started.

With late acks a worker holds each message it runs until the run ends. If
the worker dies in the instant between receiving a message and claiming its
task (submitted -> working), the task is still `submitted`, nothing
heartbeats for it, and the Redis transport returns the message only after
the visibility timeout (longer than the hard time limit: minutes).

Beat checks the transport's unacknowledged deliveries: one older than the
stale threshold whose task is still `submitted` belongs to a worker that is
dead (a live one claims within milliseconds), so it is put back at the
front of its queue. If that worker was merely slow, the second copy finds
the task claimed and does nothing: the claim is a compare-and-set.
Brokers that return a dead consumer's messages themselves (RabbitMQ) need
none of this; it runs only on the Redis transport.

2. Queued messages the broker itself lost: a Redis without persistence (or
one whose data was flushed) restarts empty, and every task whose message
was waiting would stay `submitted` for ever. Beat keeps a marker key in the
broker; when it is missing (the first run ever, or the broker lost its
data) every `submitted` task is sent again, then the marker is set. This
needs a store that can list its tasks; the scan happens only then.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from celery import Celery

from shared.dispatch import FULFIL_TASK
from shared.store import ListableStore, TaskStore
from shared.task import SUBMITTED, state_of

log = logging.getLogger(__name__)

BROKER_MARKER = "toolnexus:broker-marker"


def rescue_stuck_deliveries(
    app: Celery, store: TaskStore, now: float, stale_after: float
) -> list[str]:
    """Requeue fulfilments received before `now - stale_after` and never
    claimed; return their task ids."""
    rescued: list[str] = []
    with app.connection_for_write() as connection:
        if connection.transport.driver_type != "redis":
            return rescued
        channel = connection.default_channel
        client = channel.client
        tags = client.zrangebyscore(channel.unacked_index_key, "-inf", now - stale_after)
        for tag in tags:
            task_id = _fulfil_task_id(client.hget(channel.unacked_key, tag))
            if task_id is None:
                continue
            task = store.get(task_id)
            if task is None or state_of(task) != SUBMITTED:
                continue  # claimed: its heartbeat and the reaper take it from here
            channel.qos.restore_by_tag(tag)
            rescued.append(task_id)
    if rescued:
        log.warning("rescue: requeued %d never-started task(s): %s", len(rescued), rescued)
    return rescued


def _fulfil_task_id(raw: Any) -> str | None:
    """The task id of an unacked fulfil message as kombu stores it, else None."""
    try:
        message = json.loads(raw)[0]
        headers = message["headers"]
    except (TypeError, ValueError, KeyError, IndexError):
        return None
    if headers.get("task") != FULFIL_TASK or not isinstance(headers.get("id"), str):
        return None
    return str(headers["id"])


def requeue_after_broker_loss(app: Celery, store: TaskStore, queue: str) -> list[str]:
    """If the broker has no marker, send every `submitted` task again; return their ids."""
    with app.connection_for_write() as connection:
        if connection.transport.driver_type != "redis":
            return []
        client = connection.default_channel.client
        if client.exists(BROKER_MARKER):
            return []
        if not isinstance(store, ListableStore):
            log.warning("rescue: the broker lost its data; this store cannot list tasks to resend")
            client.set(BROKER_MARKER, "1")
            return []
        waiting = [i for i, task in store.all().items() if state_of(task) == SUBMITTED]
        for task_id in waiting:
            app.send_task(FULFIL_TASK, args=[task_id], task_id=task_id, queue=queue)
        # Set only once everything is resent: a crash in between resends again.
        client.set(BROKER_MARKER, "1")
    if waiting:
        log.warning("rescue: the broker had no marker; resent %d submitted task(s)", len(waiting))
    return waiting
