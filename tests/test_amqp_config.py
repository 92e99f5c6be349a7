"""The Celery settings an amqp:// broker gets, on the front end and the worker alike.

The queue declarations must match exactly between the two apps (RabbitMQ
refuses a second declaration that differs); tests/test_deployment_behaviour.py
runs both apps (compose's web, worker and beat) against the machine's RabbitMQ,
on the deployment matrix's amqp broker (tests/support/matrix.py).
"""

from __future__ import annotations

import pytest

from shared.broker.amqp import amqp_queues, is_amqp
from shared.broker.dispatch import CeleryDispatcher
from shared.errors import ConfigError
from shared.settings import Settings
from worker.runtime.app import celery_config

AMQP = "amqp://guest:guest@127.0.0.1:5672/none"


def declaration(queue: object) -> tuple[object, ...]:
    from kombu.entity import Queue

    assert isinstance(queue, Queue)
    exchange = queue.exchange
    return (
        queue.name,
        queue.durable,
        dict(queue.queue_arguments or {}),
        exchange.name,
        exchange.type,
        queue.routing_key,
    )


@pytest.mark.parametrize("url", ["amqp://h", "AMQPS://h", "pyamqp://h"])
def test_amqp_schemes(url: str) -> None:
    assert is_amqp(url)


@pytest.mark.parametrize("url", ["redis://h", "rediss://h", "memory://"])
def test_other_schemes(url: str) -> None:
    assert not is_amqp(url)


@pytest.mark.parametrize("kind", ["quorum", "classic"])
def test_both_apps_declare_the_fulfil_queue_alike(kind: str) -> None:
    settings = Settings.from_env({"TOOLNEXUS_BROKER_URL": AMQP, "TOOLNEXUS_AMQP_QUEUE_TYPE": kind})
    worker = {declaration(q)[0]: declaration(q) for q in celery_config(settings)["task_queues"]}
    dispatcher = CeleryDispatcher(settings)
    try:
        web = [declaration(q) for q in dispatcher.app.conf.task_queues]
        options = dispatcher.app.conf.broker_transport_options
    finally:
        dispatcher.close()
    assert web == [worker["toolnexus"]]
    assert set(worker) == {"toolnexus", "push"}
    for name, durable, arguments, exchange, exchange_type, key in worker.values():
        assert (durable, arguments) == (True, {"x-queue-type": kind})
        # Native delayed delivery (countdowns on quorum queues) needs a topic exchange.
        assert (exchange, exchange_type, key) == (name, "topic", name)
    assert options["confirm_publish"] is True
    assert celery_config(settings)["broker_transport_options"]["confirm_publish"] is True


def test_redis_brokers_keep_plain_queues_and_no_confirms() -> None:
    config = celery_config(Settings.from_env({"TOOLNEXUS_BROKER_URL": "redis://h:1/0"}))
    assert "confirm_publish" not in config["broker_transport_options"]
    assert all(not q.queue_arguments for q in config["task_queues"])


def test_an_unknown_queue_type_is_one_clear_line() -> None:
    with pytest.raises(ConfigError, match="AMQP_QUEUE_TYPE='lazy': use quorum or classic"):
        Settings.from_env({"TOOLNEXUS_AMQP_QUEUE_TYPE": "lazy"})
    with pytest.raises(ValueError, match="use quorum or classic"):
        amqp_queues(["q"], "stream")
