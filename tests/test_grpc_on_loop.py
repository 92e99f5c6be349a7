"""Which gRPC unary calls the process answers on its event loop (web.grpc.aio.OnLoop):
reads, and sends that return at once where a send is one round trip; every
other call on the pool."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from a2a.types import a2a_pb2

from web.grpc import draft11
from web.grpc.aio import COOL_OFF, ON_LOOP, SLOW, AsyncA2AGrpcService, OnLoop


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_fast_answers_keep_the_calls_on_the_loop() -> None:
    clock = Clock()
    on_loop = OnLoop(clock)
    for _ in range(3):
        assert on_loop.allowed()
        on_loop.took(SLOW / 10)
    assert on_loop.allowed()


def test_one_slow_answer_sends_the_next_calls_to_the_pool_for_the_cool_off() -> None:
    clock = Clock()
    on_loop = OnLoop(clock)
    on_loop.took(SLOW * 2)
    assert not on_loop.allowed()
    clock.now += COOL_OFF / 2
    assert not on_loop.allowed()
    clock.now += COOL_OFF / 2
    assert on_loop.allowed()  # tried on the loop again


def test_no_call_that_waits_or_revokes_runs_on_the_loop_unasked() -> None:
    # A blocking SendMessage waits for its task; a cancel revokes on the broker.
    assert ON_LOOP.isdisjoint({"SendMessage", "CancelTask", "ListTasks"})


class WhereAnswered:
    """The binding's methods, saying which thread answered each call."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def answer(self, *args: Any) -> a2a_pb2.Task:
        self.threads.append(threading.current_thread())
        return a2a_pb2.Task(id="t")


def _decoded(request: Any) -> Any:
    """`request` as the server decodes it: the 1.1 draft's message (`web.grpc.wire`)."""
    kind = draft11.message_class(request.DESCRIPTOR.full_name)
    return kind.FromString(request.SerializeToString())


def _send(*, at_once: bool, webhook: bool = False) -> Any:
    configuration = a2a_pb2.SendMessageConfiguration(return_immediately=at_once)
    if webhook:
        configuration.task_push_notification_config.url = "https://hooks.example/a2a"
    message = a2a_pb2.Message(message_id="m", parts=[a2a_pb2.Part(text="hi")])
    return _decoded(a2a_pb2.SendMessageRequest(message=message, configuration=configuration))


def _answered_on_loop(name: str, request: Any, *, short_sends: bool) -> bool:
    where = WhereAnswered()
    served = AsyncA2AGrpcService(where, short_sends=short_sends)  # type: ignore[arg-type]

    async def call() -> threading.Thread:
        await served.unary(name, "kind", {}, request, None)
        return threading.current_thread()

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("web.grpc.aio.metadata_of", lambda context: {})
            loop_thread = asyncio.run(call())
    finally:
        served.close()
    (answered_by,) = where.threads
    return answered_by is loop_thread


@pytest.mark.parametrize(
    ("name", "request_made", "short_sends", "on_loop"),
    [
        ("GetTask", lambda: _decoded(a2a_pb2.GetTaskRequest(id="t")), False, True),
        ("SendMessage", lambda: _send(at_once=True), True, True),
        ("SendMessage", lambda: _send(at_once=True), False, False),  # a RabbitMQ publish
        ("SendMessage", lambda: _send(at_once=False), True, False),  # waits for its task
        ("SendMessage", lambda: _send(at_once=True, webhook=True), True, False),
        ("CancelTask", lambda: _decoded(a2a_pb2.CancelTaskRequest(id="t")), True, False),
        ("ListTasks", lambda: _decoded(a2a_pb2.ListTasksRequest()), True, False),
    ],
    ids=[
        "get",
        "send-at-once",
        "send-at-once-slow-publish",
        "send-blocking",
        "send-with-webhook",
        "cancel",
        "list",
    ],
)
def test_each_call_is_answered_where_its_kind_belongs(
    name: str, request_made: Any, short_sends: bool, on_loop: bool
) -> None:
    assert _answered_on_loop(name, request_made(), short_sends=short_sends) is on_loop
