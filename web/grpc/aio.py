"""The gRPC binding on asyncio (grpc.aio): what the gRPC process serves.

The RPCs are `web.grpc.service`'s, run from an event loop:

- a unary call runs the binding's synchronous method (`A2AGrpcService.answer`:
  the handler, its store round trips, its checks) on a thread of a
  pool, as the synchronous server would (a blocking SendMessage holds its
  thread while it waits, as it holds a worker of gunicorn's); except
  GetTask, one store read, which runs on the loop itself: the hand-off to
  a thread and back costs the process more than the read (bench/grpc_load.py
  measures both; docs/grpc.md has the figures). Where the store reads from
  the loop (`TaskReadsOnLoop`: Redis over TCP or a Unix socket) the read
  is awaited there, sent together with the others asked meanwhile, and the
  call answered from it (`web.core.read_ahead`); elsewhere it is the
  store's blocking read, on the loop while reads stay fast (`OnLoop`). A
  SendMessage that returns at once and names no webhook runs on the loop
  too, where the process hands tasks to a Redis broker (a create and
  a publish, two short round trips; a RabbitMQ publish waits for the
  broker's confirm, and retries, so it stays on the pool);
- a long-poll GetTask (a 1.1 caller's, with `current_generation`) takes no
  thread either: its wait (`A2AGrpcService.long_poll`) is driven as a
  stream is, below, until the task's generation passes the one it named or
  its deadline comes; then it is answered as any GetTask, a plain read;
- a stream holds no thread. Its follower is opened with a nudge
  (`web.core.streaming.Stream.open`): where it would wait for its task's next
  event it hands back at once, and the store's watch calls the nudge (from
  whichever thread woke it: the Redis listener, a commit) when there may be
  more. The stream's coroutine then reads on, a step at a time, on a small
  pool of its own (so blocking sends never starve streams); between steps
  it is one parked coroutine, however long the task takes.

A client that cancels its call cancels the coroutine: the follower is
closed once any step it is in has returned (a generator is never closed
while it runs), which ends its watch; the call is logged and counted then.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from enum import Enum
from functools import partial
from typing import Any, Final, NoReturn

from a2a.types import a2a_pb2, a2a_pb2_grpc
from google.protobuf.message import Message as ProtoMessage

from shared.errors import StoreError
from shared.store.contract import TaskReadsOnLoop
from web.core.read_ahead import reading_ahead
from web.grpc.service import (
    STREAMING,
    UNARY,
    A2AGrpcService,
    LongPoll,
    Observed,
    Replies,
    Status,
    metadata_of,
    record,
    streamed,
)
from web.grpc.wire import DETAILS_KEY
from web.http.disconnects import Hangup
from web.http.metrics import web_metrics

log = logging.getLogger(__name__)

# Threads for unary calls: each holds one for its length (a blocking send
# for the task's), as a synchronous server's call does.
UNARY_THREADS: Final = 256
# Threads that read for streams, one step at a time: reads are short.
STREAM_THREADS: Final = 8
# Items a stream reads in one step before the loop sends them.
STEP: Final = 64
# Unary calls answered on the loop itself: each is one short store read.
ON_LOOP: Final = frozenset({"GetTask"})
# Of those, the calls whose task (the request's `id`) is read from the loop
# without blocking it, where the store can (`TaskReadsOnLoop`).
READ_AHEAD: Final = frozenset({"GetTask"})
# Unary calls answered on the loop when they return at once (`_returns_at_once`)
# and sends are short: a create and a publish, each one round trip.
ON_LOOP_AT_ONCE: Final = frozenset({"SendMessage"})
_SEND_REQUEST: Final = a2a_pb2.SendMessageRequest.DESCRIPTOR.full_name
# Unary calls that may long-poll (A2A 1.1), and the request field that asks
# for it.
LONG_POLLS: Final[Mapping[str, str]] = {"GetTask": "current_generation"}
# An answer on the loop that took longer than this (a slow or unreachable
# store) sends the next ones to the pool for COOL_OFF seconds, so a store in
# trouble stalls the loop, and every stream on it, for one call at most.
SLOW: Final = 0.005
COOL_OFF: Final = 1.0

_DONE: Final = object()  # a long-poll GetTask's wait has ended


class _Turn(Enum):
    MORE = "more"  # read on at once
    WAIT = "wait"  # read on once nudged
    END = "end"


def _advance(items: Iterator[Any]) -> tuple[list[tuple[int, dict[str, Any]]], _Turn]:
    """One step of a stream, on a pool thread: what it has now, and what next."""
    batch: list[tuple[int, dict[str, Any]]] = []
    for item in items:
        if item is None:
            return batch, _Turn.WAIT
        batch.append(item)
        if len(batch) >= STEP:
            return batch, _Turn.MORE
    return batch, _Turn.END


class OnLoop:
    """Whether a short call may run on the event loop now: yes, until one
    took longer than SLOW; then no for COOL_OFF seconds (then it tries again)."""

    __slots__ = ("_clock", "_pooled_until")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._pooled_until = 0.0

    def allowed(self) -> bool:
        return self._clock() >= self._pooled_until

    def took(self, seconds: float) -> None:
        if seconds > SLOW:
            self._pooled_until = self._clock() + COOL_OFF


class AsyncA2AGrpcService(a2a_pb2_grpc.A2AServiceServicer):
    def __init__(
        self,
        service: A2AGrpcService,
        on_loop: OnLoop | None = None,
        *,
        short_sends: bool = False,
        reads: TaskReadsOnLoop | None = None,
    ) -> None:
        """`short_sends`: a send's publish is one round trip that never waits
        for a confirm or retries (the direct Redis sender), so a send that
        returns at once may run on the loop. `reads`: the store's reads from
        the loop, where it has them: GetTask then reads its task without
        blocking the loop (`read_ahead`)."""
        self._service = service
        self._on_loop = on_loop or OnLoop()
        self._short_sends = short_sends
        self._reads = reads
        self._unary_calls = concurrent.futures.ThreadPoolExecutor(
            UNARY_THREADS, thread_name_prefix="grpc-call"
        )
        self._steps = concurrent.futures.ThreadPoolExecutor(
            STREAM_THREADS, thread_name_prefix="grpc-stream"
        )

    def _short_call(self, name: str, request: Any) -> bool:
        """Whether the call is short enough to answer on the loop (while
        `OnLoop` allows): a read, or a send that returns at once."""
        if name in ON_LOOP:
            # A call that still asks to wait (one the answer refuses) never runs
            # on the loop, where its wait would stall it.
            return not _asks_to_wait(name, request)
        return self._short_sends and name in ON_LOOP_AT_ONCE and _returns_at_once(request)

    def _reads_ahead(self, name: str, request: Any) -> str:
        """The task a call on the loop reads ahead (`TaskReadsOnLoop`), or ""
        for one answered as it is: without the reader, a call that is not
        a plain GetTask, and a finished task this process answers for."""
        if self._reads is None or name not in READ_AHEAD or _asks_to_wait(name, request):
            return ""
        task_id = getattr(request, "id", "")
        return "" if not isinstance(task_id, str) or self._service.keeps(task_id) else task_id

    def close(self) -> None:
        if self._reads is not None:
            self._reads.close()
        self._unary_calls.shutdown(wait=False)
        self._steps.shutdown(wait=False)

    async def unary(
        self, name: str, kind: str, replies: Replies, request: Any, context: Any
    ) -> ProtoMessage:
        loop = asyncio.get_running_loop()
        metadata = metadata_of(context)
        started = time.monotonic()
        if _asks_to_wait(name, request):
            try:
                # Off the loop: it checks the caller (a JWT may fetch its issuer's keys).
                poll = await loop.run_in_executor(
                    self._steps, self._service.long_poll, request, metadata
                )
                if poll is not None:
                    await self._wait(poll)
                    request.ClearField(LONG_POLLS[name])  # waited: now the task as it stands
            except asyncio.CancelledError:
                record(name, "CANCELLED", started)  # the caller went away
                raise
        answering = partial(self._service.answer, name, kind, request, metadata, replies, started)
        reads, task_id = self._reads, self._reads_ahead(name, request)
        if reads is not None and task_id:
            try:
                found = await reads.read(task_id)
            except StoreError:  # read the blocking way, which says what is wrong
                answer = await loop.run_in_executor(self._unary_calls, answering)
            else:
                with reading_ahead(task_id, found.task if found is not None else None):
                    answer = answering()
        elif self._short_call(name, request) and self._on_loop.allowed():
            began = time.monotonic()
            answer = answering()
            self._on_loop.took(time.monotonic() - began)
        else:
            answer = await loop.run_in_executor(self._unary_calls, answering)
        if isinstance(answer, tuple):
            await _abort(context, answer)
        return answer

    async def _wait(self, poll: LongPoll) -> None:
        """Drive a long-poll's wait, a step at a time on the streams' pool, each
        step once nudged or at the deadline. A step the store fails ends the
        wait: the answer's read then says what is wrong."""
        loop = asyncio.get_running_loop()
        nudged = asyncio.Event()
        steps = poll.steps(_nudge(loop, nudged))
        step: concurrent.futures.Future[Any] | None = None
        try:
            while True:
                nudged.clear()  # before the step: a wake-up during it nudges again
                step = self._steps.submit(next, steps, _DONE)
                try:
                    if await asyncio.wrap_future(step) is _DONE:
                        return
                except Exception:
                    log.warning(
                        "a long-poll GetTask's wait failed; answering at once", exc_info=True
                    )
                    return
                left = poll.deadline - time.monotonic()
                if left <= 0:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(nudged.wait(), left)
        finally:
            _after(step, steps.close)  # its watch ends

    async def stream(
        self, name: str, kind: str, request: Any, context: Any
    ) -> AsyncIterator[a2a_pb2.StreamResponse]:
        loop = asyncio.get_running_loop()
        metadata = metadata_of(context)
        started, outcome, events = time.monotonic(), "ok", 0
        # The call's log binding and span live in a context of their own, in
        # which every step runs and which is left only once the last step has
        # returned: not in this generator, whose end may run in another task
        # (asyncio finalizes an abandoned generator in one of its own).
        bound = contextvars.Context()
        observed = bound.run(Observed, name, metadata)  # it binds as it is made
        bound.run(observed.__enter__)
        opened = self._steps.submit(bound.run, self._service.opened, name, kind, request, metadata)
        stream = await asyncio.wrap_future(opened)
        if isinstance(stream, tuple):
            bound.run(observed.__exit__, None, None, None)
            await _abort(context, stream)
        hangup = Hangup()
        nudged = asyncio.Event()
        items = stream.open(hangup, _nudge(loop, nudged))
        step: concurrent.futures.Future[Any] | None = None
        web_metrics().streams_open.inc()
        try:
            turn = _Turn.MORE
            while turn is not _Turn.END:
                if turn is _Turn.WAIT:
                    await nudged.wait()
                nudged.clear()  # before the step: a wake-up during it nudges again
                step = self._steps.submit(bound.run, _advance, items)
                batch, turn = await asyncio.wrap_future(step)
                for item in batch:
                    response = streamed(item, stream.wire.version)
                    if isinstance(response, tuple):
                        outcome = response[0].name
                        await _abort(context, response)
                    events += 1
                    yield response
        finally:
            hangup.fire()
            web_metrics().streams_open.dec()
            ended = (outcome, events)

            def finish() -> None:
                close: Callable[[], None] = getattr(items, "close", lambda: None)
                try:
                    close()  # its watch ends
                finally:
                    record(name, ended[0], started, ended[1])
                    observed.__exit__(None, None, None)

            _after(step, lambda: bound.run(finish))


def _returns_at_once(request: Any) -> bool:
    """A send that returns without waiting for its task and names no webhook
    (whose address the send checks, a name lookup that may be slow). Requests
    arrive as the 1.1 draft's messages (`web.grpc.wire`): told by name."""
    if not isinstance(request, ProtoMessage) or request.DESCRIPTOR.full_name != _SEND_REQUEST:
        return False
    configuration = request.configuration
    return configuration.return_immediately and not configuration.HasField(
        "task_push_notification_config"
    )


def _asks_to_wait(name: str, request: Any) -> bool:
    field = LONG_POLLS.get(name)
    return field is not None and isinstance(request, ProtoMessage) and request.HasField(field)


def _nudge(loop: asyncio.AbstractEventLoop, nudged: asyncio.Event) -> Callable[[], None]:
    def nudge() -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the process stops
            loop.call_soon_threadsafe(nudged.set)

    return nudge


def _after(step: concurrent.futures.Future[Any] | None, then: Callable[[], None]) -> None:
    """Run `then` once the step the follower may be in has returned (a
    generator is never closed while it runs)."""
    if step is not None and not step.done():
        step.add_done_callback(lambda _: then())
    else:
        then()


async def _abort(context: Any, status: Status) -> NoReturn:
    code, message, details = status
    await context.abort(code, message, trailing_metadata=((DETAILS_KEY, details),))
    raise AssertionError("grpc's abort returns only by raising")


def _unary_rpc(name: str, kind: str, replies: Replies) -> Any:
    async def rpc(self: AsyncA2AGrpcService, request: Any, context: Any) -> ProtoMessage:
        return await self.unary(name, kind, replies, request, context)

    rpc.__name__ = name
    return rpc


def _streaming_rpc(name: str, kind: str) -> Any:
    # An async generator function itself: grpc.aio tells a streaming handler so.
    async def rpc(self: AsyncA2AGrpcService, request: Any, context: Any) -> AsyncIterator[Any]:
        async for response in self.stream(name, kind, request, context):
            yield response

    rpc.__name__ = name
    return rpc


# The RPCs of `web.grpc.service`'s tables, looked up by name on the servicer.
for _name, (_kind, _replies) in UNARY.items():
    setattr(AsyncA2AGrpcService, _name, _unary_rpc(_name, _kind, _replies))
for _name, _kind in STREAMING.items():
    setattr(AsyncA2AGrpcService, _name, _streaming_rpc(_name, _kind))
