"""The front end's direct Redis queue writes exactly what kombu would.

That a real worker runs what it queues is tests/test_worker_celery.py's
business (its front end sends through this queue)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from shared import Settings
from shared.broker.dispatch import CeleryDispatcher
from shared.broker.dispatcher import FULFIL_TASK

QUEUE = "toolnexus-direct-test"
KOMBU_QUEUE = "toolnexus-kombu-test"
TASK_ID = "3f2a7c1e-direct"


def _decoded(raw: bytes) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(raw)
    message["body"] = json.loads(base64.b64decode(message["body"]))
    return message


@pytest.fixture
def broker_url(redis_url: str) -> str:
    return redis_url.rsplit("/", 1)[0] + "/3"  # not db 0: the event channel names its db


@pytest.fixture
def dispatcher(broker_url: str) -> Iterator[CeleryDispatcher]:
    dispatcher = CeleryDispatcher(Settings(broker_url=broker_url, queue=QUEUE))
    yield dispatcher
    dispatcher.close()


# Published once `send()` returned: Redis runs commands one at a time and
# hands a subscriber its messages in that order, so every message before
# this one's is what `send()` published.
_AFTER = b"toolnexus-test:after-the-send"


def _published(broker_url: str, send: Any) -> list[tuple[bytes, bytes]]:
    """The (channel, data) of every PUBLISH while `send()` runs."""
    client = redis.Redis.from_url(broker_url)
    subscriber = client.pubsub()
    subscriber.psubscribe("*")
    assert subscriber.get_message(timeout=2) is not None  # the subscription itself
    send()
    client.publish(_AFTER, b"")
    seen = []
    deadline = time.monotonic() + 30
    while (message := subscriber.get_message(timeout=1)) is None or message["channel"] != _AFTER:
        if message is not None:
            seen.append((message["channel"], message["data"]))
        assert time.monotonic() < deadline, (
            f"the marker published after the send never came: {seen}"
        )
    subscriber.close()
    client.close()
    return seen


def test_the_message_and_its_event_are_what_kombu_writes(
    dispatcher: CeleryDispatcher, broker_url: str
) -> None:
    headers = {"toolnexus_request_id": "req-1"}
    ours = _published(broker_url, lambda: dispatcher._redis_queue.send(TASK_ID, headers))  # type: ignore[union-attr]
    # Celery's own way, through kombu, from an app configured the same way.
    app = dispatcher.app
    theirs = _published(
        broker_url,
        lambda: app.send_task(
            FULFIL_TASK, args=[TASK_ID], task_id=TASK_ID, queue=KOMBU_QUEUE, headers=headers
        ),
    )
    broker = redis.Redis.from_url(broker_url)
    mine, kombus = _decoded(broker.rpop(QUEUE)), _decoded(broker.rpop(KOMBU_QUEUE))  # type: ignore[arg-type]
    for message in (mine, kombus):
        assert message["properties"].pop("delivery_tag")  # unique per message
        message["properties"]["delivery_info"].pop("routing_key")  # the queues differ
    assert mine == kombus
    # The task-sent event, on the same channel, with the same fields.
    assert [channel for channel, _ in ours] == [channel for channel, _ in theirs]
    assert ours[0][0] == b"/3.celeryev/task.sent"
    events = [_decoded(data) for _, data in (ours[0], theirs[0])]
    for event in events:
        event["properties"].pop("delivery_tag")
        for varying in ("timestamp", "clock", "queue", "routing_key"):
            event["body"].pop(varying)
    assert events[0] == events[1]


def test_the_broker_check_asks_on_a_pooled_connection(
    dispatcher: CeleryDispatcher, broker_url: str
) -> None:
    """A held send's check that the broker answers (`Turns`, up to four a
    second per process) makes no connection of its own each time."""
    server = redis.Redis.from_url(broker_url)
    dispatcher.check()  # the pool's first connection
    before = server.info("stats")["total_connections_received"]
    for _ in range(20):
        dispatcher.check()
    assert server.info("stats")["total_connections_received"] == before
    server.close()


def test_the_broker_check_refuses_promptly_when_the_broker_is_down() -> None:
    from shared.errors import BrokerError
    from tests.support.redis_server import RedisServer

    server = RedisServer().start()
    dispatcher = CeleryDispatcher(Settings(broker_url=f"{server.url}/3", queue=QUEUE))
    try:
        dispatcher.check()
        server.close()
        # Refused, not waited on: a hang fails the test by its timeout.
        with pytest.raises(BrokerError, match="broker unavailable"):
            dispatcher.check()
    finally:
        dispatcher.close()
