"""Synchronous delivery code that waits without an OS thread.

A delivery is synchronous code (Celery's tracer, the claim, the saves, the
acknowledgement) around an async agent's coroutine. A green job runs that
code as a greenlet on the thread of the process's event loop: where it waits
for a coroutine it switches back to the loop, and the loop switches into it
again once the coroutine is done. A waiting call is then a suspended
greenlet and a coroutine, not a parked thread: it costs memory, and no CPU
until its coroutine ends.

Work that blocks (a store round trip that may stall, the user's hook) goes
to a thread of a small pool while the job waits for it (`off_loop`), so a
slow store never stalls the loop and the other calls on it. Outside a green
job `off_loop` simply calls, so the same code runs on a
pool thread, in a prefork child or in the embedded server unchanged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import greenlet

T = TypeVar("T")
P = ParamSpec("P")

# Threads for the blocking steps green jobs hand off: short store round
# trips and the user's hook, a few at a time.
OFF_LOOP_THREADS = 16


class GreenJob(greenlet.greenlet):  # type: ignore[misc]
    """A delivery running on the loop's thread (the type says so to `in_green_job`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, run: Callable[[], object]) -> None:
        super().__init__(run)
        self.loop = loop


_off_loop = concurrent.futures.ThreadPoolExecutor(
    max_workers=OFF_LOOP_THREADS, thread_name_prefix="toolnexus-off-loop"
)


def start(
    loop: asyncio.AbstractEventLoop, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> concurrent.futures.Future[T]:
    """Run `function(*args, **kwargs)` as a green job on `loop` (from any
    thread); the future settles with what it returned or raised."""
    done: concurrent.futures.Future[T] = concurrent.futures.Future()

    def body() -> None:
        if not done.set_running_or_notify_cancel():
            return
        try:
            done.set_result(function(*args, **kwargs))
        except BaseException as error:  # the job's end, whatever it is, goes to its future
            done.set_exception(error)

    def begin() -> None:
        GreenJob(loop, body).switch()

    loop.call_soon_threadsafe(begin)
    return done


def current_job() -> GreenJob | None:
    """The green job running now, or None on a plain thread."""
    current = greenlet.getcurrent()
    return current if isinstance(current, GreenJob) else None


def in_green_job() -> bool:
    return current_job() is not None


def wait(future: asyncio.Future[T]) -> T:
    """The result of `future` (of the job's loop), waited for by switching
    back to the loop: only a green job may wait this way."""
    job = current_job()
    if job is None:
        raise RuntimeError("wait() outside a green job")
    if not future.done():
        # Done callbacks run on the loop, in its own greenlet: the switch
        # resumes this job exactly where it left.
        future.add_done_callback(lambda _: job.switch() if not job.dead else None)
        job.parent.switch()
    return future.result()


def off_loop(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """`function(*args, **kwargs)`; in a green job, on a thread of its own
    while the loop runs the other calls."""
    job = current_job()
    if job is None:
        return function(*args, **kwargs)
    handed = _off_loop.submit(function, *args, **kwargs)
    return wait(asyncio.wrap_future(handed, loop=job.loop))
