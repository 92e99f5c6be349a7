"""The Redis broker transport: one client per channel, whatever kombu does per command."""

from __future__ import annotations

import inspect
import json
import threading
import time
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Queue, pools
from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

from shared import Settings
from shared.broker.dispatcher import FULFIL_TASK
from shared.broker.redis import Channel, Transport, broker_transport
from shared.stores.memory.store import MemoryStore
from tests.support.redis_server import RedisServer
from worker.runtime.app import celery_config, create_celery

QUEUE = "toolnexus-broker-test"


def test_kombu_still_has_what_the_transport_builds_on() -> None:
    # If a kombu upgrade moves these, the shared client would silently stop
    # being used (or break): fail here first, by name.
    for name in (
        "conn_or_acquire",
        "_create_client",
        "pool",
        "_disconnect_pools",
        "_get_pool",
        "_get_client",
        "subclient",
        "_in_poll",
        "_in_listen",
    ):
        assert hasattr(kombu_redis.Channel, name), f"kombu's Redis Channel lost {name}"
    # The poller's checks, whose dropped connections the transport makes a lost connection.
    for name in ("maybe_check_brpop_health", "maybe_check_subclient_health", "_channels", "add"):
        assert hasattr(kombu_redis.MultiChannelPoller(), name), f"kombu's poller lost {name}"
    assert "connection.disconnect()" in inspect.getsource(
        kombu_redis.MultiChannelPoller.maybe_check_brpop_health
    )
    # The worker's loop reads a pub/sub reply with a blocking parse_response():
    # the bounded pub/sub (shared.broker.redis) is what keeps that within a deadline.
    assert "c.parse_response()" in inspect.getsource(kombu_redis.Channel._receive_one)
    # _get_pool's guard reads the channel's transport and its kombu Connection
    # (where kombu's _connparams reads the host), and must raise an error that
    # kombu and Celery count as a lost connection.
    assert "self.connection.client" in inspect.getsource(kombu_redis.Channel._connparams)
    assert RedisConnectionError in Transport.connection_errors
    assert issubclass(Transport, kombu_redis.Transport)
    assert Transport.Channel is Channel


def test_redis_brokers_get_the_transport_and_others_keep_theirs() -> None:
    assert broker_transport("redis://localhost:6379/0") == "shared.broker.redis:Transport"
    assert broker_transport("REDISS://localhost:6380/0") == "shared.broker.redis:Transport"
    assert broker_transport("amqp://guest@localhost//") is None
    assert broker_transport("sentinel://localhost:26379") is None
    assert celery_config(Settings(broker_url="amqp://localhost//"))["broker_transport"] is None


def test_a_channel_reuses_its_client_until_its_pool_is_made_again(redis_url: str) -> None:
    with Connection(redis_url, transport=Transport) as connection:
        channel = connection.channel()
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
            assert first.ping()
        given = redis.Redis.from_url(redis_url)
        with channel.conn_or_acquire(given) as passed:
            assert passed is given
        channel._disconnect_pools()  # as kombu does when a connection is lost
        with channel.conn_or_acquire() as fresh:
            assert fresh is not first
            assert fresh.connection_pool is channel.pool
            assert fresh.ping()
        channel.close()


def test_a_channel_left_open_by_a_collected_connection_raises_a_connection_error() -> None:
    # What Celery's consumer does when Redis dies: collect() closes the
    # channels last first, and the pidbox channel's close fails deleting its
    # auto-delete fanout queue on the dead server, so channels made before it
    # stay open on a transport whose kombu Connection is gone. kombu (stock
    # too) then fails making their pool with AttributeError ('NoneType' has
    # no attribute 'hostname'), and Celery's worker dies of it.
    server = RedisServer().start()
    try:
        connection = Connection(server.url, transport=Transport)
        connection.connect()
        left_open = connection.channel()
        pidbox = connection.channel()
        fanout = Queue("worker.pidbox", Exchange("pidbox", type="fanout"), auto_delete=True)  # type: ignore[no-untyped-call]
        Consumer(pidbox, [fanout], callbacks=[lambda body, message: None]).consume()  # type: ignore[no-untyped-call]
        server.kill()
        connection.collect(socket_timeout=0.1)
        assert not left_open.closed  # the state the worker met
        with pytest.raises(connection.connection_errors), left_open.conn_or_acquire():
            pass
    finally:
        server.close()


def test_sends_create_no_client_per_message(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[Any] = []
    create = Channel._create_client

    def counted(channel: Channel, *args: Any, **kwargs: Any) -> Any:
        made.append(channel)
        return create(channel, *args, **kwargs)

    monkeypatch.setattr(Channel, "_create_client", counted)
    # Celery keeps producers in kombu's process-wide pools, keyed by broker
    # URL: start as a new process would, with pools of its own, not with an
    # earlier test's channel. Not `pools.reset()`: it closes those channels,
    # and closing one whose BRPOP went to a server an earlier test stopped or
    # put behind a silent proxy waits for a reply forever (a CI run hung here).
    monkeypatch.setattr(pools, "connections", pools.Connections(pools.get_limit()))
    monkeypatch.setattr(pools, "producers", pools.Producers(pools.get_limit()))
    # The worker's app sends too (the reaper's and beat's resends); the front
    # end writes to Redis directly (shared.broker.redis_queue).
    app = create_celery(Settings(broker_url=redis_url, queue=QUEUE), store=MemoryStore())
    try:
        app.send_task(FULFIL_TASK, args=["task-0"], task_id="task-0", queue=QUEUE)
        after_first = len(made)
        for number in range(1, 11):
            task_id = f"task-{number}"
            app.send_task(FULFIL_TASK, args=[task_id], task_id=task_id, queue=QUEUE)
    finally:
        app.close()
    assert after_first >= 1  # the transport is the one in use
    assert len(made) == after_first  # ten more sends (and task-sent events), no new client
    queued = redis.Redis.from_url(redis_url).lrange(QUEUE, 0, -1)
    ids = sorted(json.loads(message)["headers"]["id"] for message in queued)
    assert ids == sorted(f"task-{number}" for number in range(11))


def test_the_worker_app_uses_the_transport(redis_url: str) -> None:
    app = create_celery(Settings(broker_url=redis_url, queue=QUEUE), store=MemoryStore())
    with app.connection_for_write() as connection:
        assert isinstance(connection.transport, Transport)


def test_a_pub_sub_read_with_no_reply_gives_up_within_the_socket_timeout(redis_url: str) -> None:
    """What the worker's loop does when its poller says the remote-control
    socket is readable but no whole reply comes (a connection lost in a
    partition): it reads on, and must give up, not hold the loop for good."""
    options = {"socket_timeout": 0.5}
    with Connection(redis_url, transport=Transport, transport_options=options) as connection:
        channel = connection.channel()
        pubsub = channel.subclient
        pubsub.subscribe("toolnexus-test-quiet")
        assert pubsub.parse_response(block=False, timeout=5)[0] == b"subscribe"
        answered: list[object] = []
        reader = threading.Thread(
            target=lambda: answered.append(pubsub.parse_response()), daemon=True
        )
        reader.start()
        reader.join(30)
        assert not reader.is_alive(), "the read waited on with no reply coming"
        assert answered == [None]
        pubsub.close()


def test_a_consumer_whose_brpop_reply_is_overdue_is_told_its_connection_is_lost(
    redis_url: str,
) -> None:
    """kombu's check drops such a connection and would make it again inside
    the worker's loop; the transport raises a lost connection instead, which
    Celery's consumer answers by starting its broker connection afresh."""
    with Connection(redis_url, transport=Transport) as connection:
        channel = connection.channel()
        cycle = connection.transport.cycle
        cycle.add(channel)
        waiting = channel.client.connection_pool.get_connection()
        waiting.connect()
        # A BRPOP sent long ago on a connection that never answered.
        channel._in_poll, channel._brpop_sent_at = waiting, time.monotonic() - 600
        with pytest.raises(RedisConnectionError, match="BRPOP is overdue"):
            cycle.maybe_check_brpop_health()
        assert channel._in_poll is None  # kombu's own drop happened first
        cycle.maybe_check_brpop_health()  # nothing waiting now: nothing to say
