"""Async agent code in a gevent-patched process: one asyncio loop for all.

The embedded server's workers are greenlets on one OS thread, and asyncio
allows one running event loop per OS thread: a loop per worker (what a
prefork or threaded worker has) fails the second async call that overlaps
the first ("Cannot run the event loop while another loop is running"). So
the process has one loop, run by a greenlet of its own (its selector is
gevent's, so while it waits every other greenlet runs), and each worker
submits its coroutine there and waits for the result as a greenlet waits.
Async clients an agent caches between calls keep working: every call runs
on the same loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")


class GreenLoop:
    """`run(awaitable)`: run it on the process's loop, waiting cooperatively."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def run(self, awaitable: Awaitable[T]) -> T:
        import gevent.event

        result: gevent.event.AsyncResult = gevent.event.AsyncResult()
        future = asyncio.run_coroutine_threadsafe(_as_coroutine(awaitable), self._started())

        def settle(done: concurrent.futures.Future[Any]) -> None:
            if done.cancelled():
                result.set_exception(asyncio.CancelledError())
            elif (error := done.exception()) is not None:
                result.set_exception(error)
            else:
                result.set(done.result())

        future.add_done_callback(settle)
        try:
            value: T = result.get()
            return value
        finally:
            if not future.done():  # the waiting greenlet was killed: stop its coroutine too
                future.cancel()

    def close(self) -> None:
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                import gevent

                loop = asyncio.new_event_loop()
                gevent.spawn(_serve, loop)
                self._loop = loop
            return self._loop


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_forever()
    finally:
        loop.close()


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable
