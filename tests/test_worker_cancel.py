"""The workers' cancel command (worker.runtime.cancel) and the resends' Celery ids.

The command reads Celery's worker registry and the Request API, which are no
documented contract: these tests fail by name when an upgrade moves them.
What the command does against a real worker is in tests/test_worker_resend.py
(a cancel stops a call whose task was sent again) and
tests/test_worker_process.py (a cancel terminates a running task).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from celery import Celery
from celery.worker import state as worker_state
from celery.worker.control import Panel
from celery.worker.request import Request
from kombu.message import Message

from shared.broker.dispatcher import CANCEL_COMMAND, FULFIL_TASK, RESEND_MARK, resend_id
from shared.settings import Settings
from shared.stores.memory.store import MemoryStore
from worker.runtime.app import create_celery
from worker.runtime.cancel import cancel_deliveries, deliveries_of, register_cancel

TASK = "0b9e1c52-7a34-4c8e-9d7f-2f1a6b3c4d5e"


@pytest.fixture
def app() -> Iterator[Celery]:
    made = create_celery(Settings(broker_url="redis://127.0.0.1:1/0"), store=MemoryStore())
    yield made
    made.close()


def received(app: Celery, celery_id: str, task_id: str) -> Request:
    """A fulfil request as a worker makes it from a message it received."""
    headers, properties, body, _ = app.amqp.as_task_v2(celery_id, FULFIL_TASK, args=[task_id])
    message = Message(  # type: ignore[no-untyped-call]
        body=json.dumps(body),
        content_type="application/json",
        content_encoding="utf-8",
        headers=headers,
        properties=properties,
        delivery_info={"exchange": "", "routing_key": "toolnexus"},
    )
    return Request(message, app=app, task=app.tasks[FULFIL_TASK])


def test_the_celery_registry_the_command_reads_is_where_it_was() -> None:
    # Every request a worker holds, by object rather than by id, so that two
    # messages under one id are both found.
    assert isinstance(worker_state.reserved_requests, weakref.WeakSet)
    assert isinstance(worker_state.active_requests, weakref.WeakSet)
    assert callable(Request.terminate)


def test_every_delivery_of_the_task_is_found_whatever_its_celery_id(app: Celery) -> None:
    first, copy = received(app, TASK, TASK), received(app, TASK, TASK)
    resent, other = received(app, resend_id(TASK), TASK), received(app, "other", "other")
    requests = (first, copy, resent, other)
    for request in requests:
        worker_state.task_reserved(request)
    worker_state.task_accepted(first)
    try:
        assert sorted(map(id, deliveries_of(TASK))) == sorted(map(id, (first, copy, resent)))
        # Not started yet, a request is terminated as soon as it starts
        # (Celery's own way); the pool is not asked to kill anything now.
        pool = SimpleNamespace(terminate_job=lambda *_: pytest.fail("nothing runs yet"))
        reply = cancel_deliveries(SimpleNamespace(consumer=SimpleNamespace(pool=pool)), TASK)
        assert reply == {"ok": f"terminated 3 delivery(ies) of {TASK}"}
    finally:
        for request in requests:
            worker_state.task_ready(request)


def test_register_cancel_makes_it_a_control_command_taking_the_task_id() -> None:
    register_cancel()
    assert Panel.data[CANCEL_COMMAND] is cancel_deliveries
    assert Panel.meta[CANCEL_COMMAND].type == "control"
    assert Panel.meta[CANCEL_COMMAND].args == [("task_id", str)]


def test_a_worker_holding_no_delivery_of_the_task_terminates_nothing() -> None:
    assert deliveries_of("no-such-task") == []
    reply = cancel_deliveries(None, task_id="no-such-task")
    assert reply == {"ok": "terminated 0 delivery(ies) of no-such-task"}


def test_each_resend_has_an_id_of_its_own_that_names_its_task() -> None:
    first, second = resend_id(TASK), resend_id(TASK)
    assert first != second
    for sent in (first, second):
        assert sent.startswith(TASK + RESEND_MARK)
