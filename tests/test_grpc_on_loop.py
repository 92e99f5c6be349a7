"""Which gRPC unary calls the process answers on its event loop (web.grpc.aio.OnLoop)."""

from __future__ import annotations

from web.grpc.aio import COOL_OFF, ON_LOOP, SLOW, OnLoop


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


def test_no_call_that_waits_or_writes_runs_on_the_loop() -> None:
    # A blocking SendMessage waits for its task; a cancel revokes on the broker.
    assert ON_LOOP.isdisjoint({"SendMessage", "CancelTask", "ListTasks"})
