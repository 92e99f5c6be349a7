"""I/O calls: the calls a worker process runs at once (TOOLNEXUS_POOL=threads|asyncio).

Celery's consumer and thread pool carry the messages exactly as they do for
prefork: one message per I/O call, acknowledged late when its call ends,
so the claim, late acks, redelivery, retries and Flower's events stay
Celery's own. Each call parks the pool thread that took its message (a
blocked thread costs memory, not CPU: docs/io-workers.md has the
figures); the agent itself runs

- as a coroutine (an `async def` or an async generator) on the process's
  one event loop, run by the thread this module starts, so a thousand
  waiting calls are a thousand coroutines sharing one loop and whatever
  clients the agent keeps between calls;
- as a plain function or generator on its pool thread.

Celery's time limits are signals to a prefork child, so here the worker
keeps them itself, and a cancel reaches a running call through the store's
watch (the per-process listener) rather than by killing a process:

- TOOLNEXUS_TIME_LIMIT after the claim (the loop sweeps its calls four
  times a second) the task is failed "timed out" and its coroutine
  cancelled; a blocking call cannot be stopped, so its result is dropped
  (every save is a change from `working`, which the task has left);
- when the store says the task left `working` (canceled, reaped), its
  coroutine is cancelled at once, and a blocking call's result dropped.

A coroutine that blocks the loop (CPU-bound work, a blocking call inside
an `async def`) delays every other call, so the loop measures its own lag
and logs a warning naming the cause.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Awaitable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

from shared.attempts import holds, releases, run_of
from shared.errors import StoreError
from shared.events import state_after
from shared.failures import TIMED_OUT, Failure
from shared.settings import Settings
from shared.store.contract import Record, Store, Watch
from shared.task import WORKING
from shared.transitions import transition
from worker.engine.agent import Agent
from worker.engine.failed_tasks import index_failed
from worker.engine.green_jobs import in_green_job, wait
from worker.engine.metrics import worker_metrics
from worker.engine.results import failed

log = logging.getLogger(__name__)

T = TypeVar("T")

# The loop looks at its own lag this often, and warns when a probe came
# back this much late; at most one warning per WARN_EVERY seconds.
LAG_PROBE = 0.25
LAG_WARNING = 0.5
WARN_EVERY = 30.0
# How often the number of I/O calls is logged while it changes.
REPORT_EVERY = 60.0
# Threads for the store calls the loop itself makes (a cancel's check, a
# time limit's failure): few, since each is one short round trip.
STORE_THREADS = 4
# What the look for a cancel calls a task released for another attempt: the
# call's run lost it, and stops as after a cancel.
RELEASED = "released for another attempt"


class CallStopped(Exception):
    """The call was stopped from outside (time limit, cancel); the message
    is the failure its task gets if nothing else ended it first."""


class IOCall:
    """One I/O call of this process: its coroutines run on the loop, and it is
    stopped (from any thread) at its time limit or when its task left `working`."""

    def __init__(
        self,
        calls: CallLoop,
        store: Store,
        claimed: Record,
        agent: Agent,
        settings: Settings,
    ) -> None:
        task_id = claimed.task["id"]
        seen = claimed.seq  # the claim's own event: later ones may be a cancel
        self.task_id = task_id
        self._epoch = run_of(claimed.task).epoch
        self._calls = calls
        self._loop = calls.loop
        self._store = store
        self._agent = agent
        self._time_limit = settings.time_limit
        self._reason: str | None = None
        self._step: asyncio.Task[Any] | None = None
        # On the loop's clock (monotonic), so the watchdog compares without a hop.
        self.deadline = self._loop.time() + self._time_limit
        self._checking = False
        self._check_again = False
        self._ended = False
        self._seen = seen

    def end(self) -> None:
        """The call returned: wake-ups from its own last save change nothing."""
        self._ended = True

    @property
    def stopped(self) -> str | None:
        """Why the call was stopped, or None while it may run."""
        return self._reason

    def run_async(self, awaitable: Awaitable[T]) -> T:
        """Run `awaitable` on the loop, waiting for it: a green job (the
        delivery itself on the loop) by switching away, a pool thread by
        blocking."""
        if in_green_job():
            step = self._loop.create_task(self._run_step(awaitable))
            try:
                return wait(step)
            except asyncio.CancelledError:
                if self._reason is None:
                    raise
                raise CallStopped(self._reason) from None
        future = asyncio.run_coroutine_threadsafe(self._run_step(awaitable), self._loop)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            if self._reason is None:
                raise
            raise CallStopped(self._reason) from None

    async def _run_step(self, awaitable: Awaitable[T]) -> T:
        self._step = asyncio.current_task()
        try:
            if self._reason is not None and self._step is not None:
                # Stopped before this step began (an async generator between
                # items): the coroutine sees CancelledError at its first await.
                self._step.cancel()
            return await awaitable
        finally:
            self._step = None

    def stop(self, reason: str) -> None:
        """Cancel the running coroutine (and any later one); from any thread."""
        if self._reason is None:
            self._reason = reason
        self._loop.call_soon_threadsafe(self._cancel_step)

    def _cancel_step(self) -> None:
        if self._step is not None:
            self._step.cancel()

    # --- the time limit (on the loop) ----------------------------------------

    def expire(self) -> None:
        """Past its time limit (the loop's watchdog calls this, on the loop)."""
        reason = f"timed out after {self._time_limit:g} s"
        log.warning("task %s: %s; stopping its call", self.task_id, reason)
        self.stop(reason)
        # A blocking call cannot be stopped: the task is failed now, and its
        # result dropped when it comes.
        self._loop.run_in_executor(self._calls.store_calls, self._fail, reason)

    def _fail(self, reason: str) -> None:
        try:
            outcome = transition(
                self._store,
                self.task_id,
                failed(reason, Failure(TIMED_OUT)),
                from_states={WORKING},
                on_terminal=self._agent.on_task,
                when=holds(self._epoch),
            )
            index_failed(self._store, outcome)
        except StoreError as error:
            # A coroutine's pool thread saves the same failure, retrying; a
            # blocking call's task is failed by the reaper once it ends.
            log.warning("task %s: cannot save its time-out yet: %s", self.task_id, error)

    # --- a cancel (a wake-up from the store's watch, on the loop) -------------

    def recheck(self) -> None:
        """Read what the task logged since last seen, one look at a time: a
        wake-up carries no data, and those meanwhile ask for one more. The
        claim's own wake-up reads nothing new, the cheapest read there is."""
        if self._ended:
            return
        if self._checking:
            self._check_again = True
            return
        self._checking = True
        looked = self._loop.run_in_executor(self._calls.store_calls, self._states_since, self._seen)
        looked.add_done_callback(self._looked)

    def _states_since(self, seen: int) -> tuple[int, str]:
        """The last event number, and the task's state after the events since
        `seen` (RELEASED when one released it: this call's run lost it)."""
        try:
            logged = self._store.events(self.task_id, seen)
        except StoreError:
            return seen, WORKING  # cannot tell now; the next wake-up or the reaper will
        events = [event for _, event in logged]
        state = state_after(events, WORKING)
        if state == WORKING and any(releases(event) for event in events):
            state = RELEASED
        return (logged[-1][0] if logged else seen), state

    def _looked(self, looked: asyncio.Future[tuple[int, str]]) -> None:
        self._checking = False
        error = looked.exception() if not looked.cancelled() else None
        if error is not None:
            log.warning("task %s: cannot look for a cancel: %r", self.task_id, error)
        elif not looked.cancelled():
            self._seen, state = looked.result()
            if state != WORKING and self._reason is None and not self._ended:
                log.info("task %s: became %s; stopping its call", self.task_id, state)
                self.stop(f"the task became {state} while its call ran")
        if self._check_again:
            self._check_again = False
            self.recheck()


class CallLoop:
    """The process's event loop in a daemon thread (started on first use:
    only the I/O modes use it), and the I/O calls running on it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: set[IOCall] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.store_calls = concurrent.futures.ThreadPoolExecutor(
            max_workers=STORE_THREADS, thread_name_prefix="toolnexus-call-store"
        )

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=self._run, args=(self._loop,), name="toolnexus-calls", daemon=True
                )
                thread.start()
            return self._loop

    def __len__(self) -> int:
        with self._lock:
            return len(self._calls)

    def add(self, call: IOCall) -> None:
        with self._lock:
            self._calls.add(call)
            worker_metrics().io_calls.inc()

    def remove(self, call: IOCall) -> None:
        with self._lock:
            if call in self._calls:
                self._calls.discard(call)
                worker_metrics().io_calls.dec()

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        loop.create_task(self._watch_lag(loop))
        loop.run_forever()

    async def _watch_lag(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop's watchdog: measure how late it wakes a sleeper (a
        coroutine that blocks delays every other call by that much), and
        stop the calls past their time limit (a sweep every LAG_PROBE
        seconds, not a timer per call set from its pool thread)."""
        warned = reported = -WARN_EVERY - REPORT_EVERY
        last_count = 0
        while True:
            before = loop.time()
            await asyncio.sleep(LAG_PROBE)
            now = loop.time()
            lag = max(0.0, now - before - LAG_PROBE)
            worker_metrics().loop_lag.set(lag)
            with self._lock:
                calls = list(self._calls)
            for call in calls:
                if call.deadline <= now and call.stopped is None:
                    call.expire()
            running = len(calls)
            if lag > LAG_WARNING and now - warned > WARN_EVERY:
                warned = now
                log.warning(
                    "event loop stalled for %.2f s with %d I/O call(s) running: an agent blocks"
                    " the loop (CPU-bound work or a blocking call inside an async def):"
                    " move that work off the loop (asyncio.to_thread), make the agent a"
                    " plain def, or run it with TOOLNEXUS_POOL=prefork",
                    lag,
                    running,
                )
            if running != last_count and now - reported > REPORT_EVERY:
                reported, last_count = now, running
                log.info("%d I/O call(s) running", running)


# The I/O modes run in one process (Celery's thread pool does not fork).
_calls = CallLoop()


def io_call_count() -> int:
    """How many I/O calls this process runs now."""
    return len(_calls)


def calls_loop() -> asyncio.AbstractEventLoop:
    """The process's event loop for I/O calls (started on first use)."""
    return _calls.loop


@contextmanager
def watching(store: Store, task_id: str) -> Iterator[Watch]:
    """The store's watch of `task_id`: how a cancel from another process
    reaches an I/O call."""
    with store.watch(task_id) as watch:
        yield watch


@contextmanager
def running_io_call(
    store: Store, claimed: Record, agent: Agent, settings: Settings, watch: Watch | None
) -> Iterator[IOCall]:
    """Run the call of the `claimed` task as an I/O call for the block: count it, keep its
    time limit, and stop it when `watch` (from `watching`, begun before the
    claim) says the task may have left `working`."""
    loop = _calls.loop
    call = IOCall(_calls, store, claimed, agent, settings)
    with ExitStack() as stack:
        _calls.add(call)
        stack.callback(_calls.remove, call)
        stack.callback(call.end)
        if watch is not None:
            # Called at once if woken since the claim (its own wake-up, or a cancel).
            watch.on_wake(lambda: loop.call_soon_threadsafe(call.recheck))
        yield call
