"""Green jobs (worker.engine.green_jobs): synchronous code that waits for
coroutines on the loop's own thread, and hands blocking work to threads
without holding the loop up. Ordered by events, not by sleeps."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from worker.engine.green_jobs import in_green_job, off_loop, start, wait


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def test_a_job_waits_for_a_coroutine_on_the_loop_s_own_thread(
    loop: asyncio.AbstractEventLoop,
) -> None:
    threads: list[int] = []

    async def answer() -> str:
        threads.append(threading.get_ident())
        await asyncio.sleep(0)
        return "answered"

    def job() -> str:
        threads.append(threading.get_ident())
        assert in_green_job()
        return wait(loop.create_task(answer()))

    assert start(loop, job).result(10) == "answered"
    assert len(set(threads)) == 1 and threads[0] != threading.get_ident()
    assert not in_green_job()


def test_many_jobs_wait_at_once_on_one_thread(loop: asyncio.AbstractEventLoop) -> None:
    release: asyncio.Event | None = None
    waiting = threading.Semaphore(0)

    def make_event() -> None:
        nonlocal release
        release = asyncio.Event()

    loop.call_soon_threadsafe(make_event)

    async def waits() -> int:
        waiting.release()
        assert release is not None
        await release.wait()
        return 1

    def job() -> int:
        return wait(loop.create_task(waits()))

    jobs = [start(loop, job) for _ in range(500)]
    for _ in jobs:
        assert waiting.acquire(timeout=10)  # every job is waiting, none finished
    assert not any(each.done() for each in jobs)
    assert release is not None
    loop.call_soon_threadsafe(release.set)
    assert sum(each.result(10) for each in jobs) == 500


def test_blocking_work_off_the_loop_does_not_stall_other_jobs(
    loop: asyncio.AbstractEventLoop,
) -> None:
    unblock = threading.Event()
    where: list[str] = []

    def blocked() -> str:
        where.append(threading.current_thread().name)
        unblock.wait(10)
        return "unblocked"

    first = start(loop, off_loop, blocked)
    # While the first job's work blocks a hand-off thread, a second job
    # runs to its end on the loop.
    assert start(loop, lambda: wait(loop.create_task(asyncio.sleep(0, "free")))).result(10) == (
        "free"
    )
    assert not first.done()
    unblock.set()
    assert first.result(10) == "unblocked"
    assert where[0].startswith("toolnexus-off-loop")


def test_a_job_s_error_and_a_coroutine_s_error_reach_the_future(
    loop: asyncio.AbstractEventLoop,
) -> None:
    async def fails() -> None:
        raise ValueError("from the coroutine")

    def job() -> None:
        wait(loop.create_task(fails()))

    with pytest.raises(ValueError, match="from the coroutine"):
        start(loop, job).result(10)
    with pytest.raises(KeyError):
        start(loop, off_loop, {}.__getitem__, "missing").result(10)


def test_off_loop_outside_a_job_simply_runs() -> None:
    assert off_loop(lambda: threading.current_thread()) is threading.current_thread()
    other = asyncio.new_event_loop()
    try:
        with pytest.raises(RuntimeError, match="outside a green job"):
            wait(other.create_future())
    finally:
        other.close()
