"""Call the agent function, whatever kind it is, as one generator.

A plain function, an `async def`, a generator or an async generator: each
becomes a generator that yields the function's progress (what a generator
yields) and returns its final result. Async code runs through `run`: by
default on an event loop kept per thread (prefork), so async clients an
agent caches between calls keep working; a loop that was interrupted (a
time limit) is replaced. The I/O modes pass their process's one loop
instead (worker.engine.io_calls).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import threading
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, TypeVar

from shared.attempts import run_of
from shared.task import Message, Task, latest_user_message
from toolnexus import Ask, Done, NeedAuth, Reject, Reply
from worker.engine.agent import Agent
from worker.engine.message_text import message_as_text

T = TypeVar("T")
Outputs = Generator[object, None, object]

# Yielding one of these ends a generator: it is the final result.
FINAL_TYPES = (Done, Reply, Ask, NeedAuth, Reject)


RunAsync = Callable[[Awaitable[Any]], Any]


def call(
    agent: Agent,
    task: Task,
    run: RunAsync | None = None,
    conversation: Sequence[Message] = (),
) -> Outputs:
    """Run `agent.run` on `task`; yields progress items, returns the result.
    `run(awaitable)` runs async code to its end (default: `run_async`);
    `conversation`: the context's earlier messages (`shared.conversation`),
    for a function that declares it."""
    run = run or run_async
    assert agent.run is not None
    message: Message = latest_user_message(task) or {
        "kind": "message",
        "role": "user",
        "messageId": "",
        "parts": [],
    }
    text = message_as_text(message)
    inputs = agent.inputs
    if not inputs:
        result = agent.run(text)
    else:
        record = run_of(task)
        offered: dict[str, Any] = {
            "text": text,
            "message": message,
            "task": task,
            "attempt": record.attempt,
            "checkpoint": record.resumes_from,
            "conversation": list(conversation),
        }
        result = agent.run(**{name: copy.deepcopy(offered[name]) for name in inputs})
    if inspect.isgenerator(result):
        return (yield from _drive(result))
    if inspect.isasyncgen(result):
        return (yield from _drive_async(result, run))
    if inspect.isawaitable(result):
        return run(result)
    return result


def _drive(generator: Generator[object, Any, object]) -> Outputs:
    try:
        while True:
            try:
                item = next(generator)
            except StopIteration as stop:
                return stop.value
            if isinstance(item, FINAL_TYPES):
                return item
            yield item
    finally:
        generator.close()


def _drive_async(generator: Any, run: RunAsync) -> Outputs:
    try:
        while True:
            try:
                item = run(generator.__anext__())
            except StopAsyncIteration:
                return None
            if isinstance(item, FINAL_TYPES):
                return item
            yield item
    finally:
        run(generator.aclose())


_loops = threading.local()


def run_async(awaitable: Awaitable[T]) -> T:
    """Run `awaitable` to its end on this thread's event loop."""
    loop: asyncio.AbstractEventLoop | None = getattr(_loops, "loop", None)
    if loop is None or loop.is_closed():
        loop = _loops.loop = asyncio.new_event_loop()
    task = loop.create_task(_as_coroutine(awaitable))
    try:
        return loop.run_until_complete(task)
    finally:
        if not task.done():
            # Interrupted from outside (a time limit's signal): the coroutine
            # must never resume under the next call, so this loop is dropped.
            task.cancel()
            loop.close()
            _loops.loop = None


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable
