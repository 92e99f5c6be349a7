"""A Dispatcher that runs fulfilment on threads in this process (embedded mode).

`toolnexus-serve` patches the standard library for gevent first (worker.cli.main),
so there these threads are greenlets, sharing the server's event loop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
import time
from collections import deque

from shared.broker.backlog import Backlog
from shared.errors import BrokerError
from shared.ops.correlation import bind, request_id
from shared.ops.fleet_tally import WorkerPresence
from shared.ops.tracing import current_context, within
from shared.owners.turns import SlotKeeper, turns_for
from shared.settings import Settings
from shared.store.contract import Store
from shared.store.wiring import abilities_of
from worker.engine.agent import Agent
from worker.engine.calling import RunAsync, run_async
from worker.engine.metrics import worker_metrics
from worker.engine.observe import observed_fulfil

log = logging.getLogger(__name__)


def default_threads(settings: Settings) -> int:
    # Agent calls mostly wait on I/O (models, APIs), so more threads than cores.
    return settings.concurrency or min(32, (os.cpu_count() or 1) + 4)


class InProcessDispatcher:
    """Queues task ids for a fixed pool of daemon threads running `fulfil`.

    Threads cannot be killed, so `revoke` stops nothing that has started:
    a canceled task's function runs to its end and its result is then
    refused by the transition (canceled is terminal). A task canceled
    while still queued is skipped when its turn comes, because `fulfil`
    only runs `submitted` tasks. There are no time limits in this mode.
    """

    takes_turns = True  # its threads make room in the turn book as each delivery ends
    in_process = True  # no broker: /readyz names these threads, not one

    def __init__(
        self,
        store: Store,
        agent: Agent,
        settings: Settings,
        *,
        threads: int | None = None,
        run_async: RunAsync = run_async,
    ) -> None:
        self._store = store
        self._agent = agent
        self._settings = settings
        self._run_async = run_async
        # (task id, the request id and trace context that queued it, when it
        # was queued), or None: stop.
        self._queue: queue.SimpleQueue[tuple[str, str | None, object, float] | None] = (
            queue.SimpleQueue()
        )
        self._closed = threading.Event()
        # When each task still in the queue was put there, oldest first.
        self._queued_at: deque[float] = deque()
        self._threads = [
            threading.Thread(target=self._work, name=f"toolnexus-worker-{n}", daemon=True)
            for n in range(threads or default_threads(settings))
        ]
        for thread in self._threads:
            thread.start()
        worker_metrics().capacity.set(len(self._threads))
        # The threads take their turns from the store's turn book, as a Celery
        # worker does: their slots registered, room made as each delivery ends.
        can = abilities_of(store)
        self.turns = turns_for(
            settings, can.turn_book, self.enqueue, release_on_commit=can.release_on_commit
        )
        self._slots = (
            SlotKeeper(
                self.turns,
                f"in-process-{os.getpid()}-{id(self):x}@{socket.gethostname()}",
                len(self._threads),
                every=settings.heartbeat,
                ttl=settings.stale_after,
            ).start()
            if self.turns is not None
            else None
        )
        # Its slots in the fleet tally, as a Celery worker's (the console's fleet page).
        documents = can.documents
        self._presence = (
            WorkerPresence(
                documents, f"in-process-{os.getpid()}@{socket.gethostname()}", len(self._threads)
            ).start()
            if documents is not None
            else None
        )

    def enqueue(self, task_id: str) -> None:
        self.check()
        now = time.time()
        self._queued_at.append(now)
        self._queue.put((task_id, request_id(), current_context(), now))

    def enqueue_later(self, task_id: str, delay: float) -> None:
        """`enqueue` after `delay` seconds (a task's next attempt)."""
        if delay <= 0:
            self.enqueue(task_id)
            return
        timer = threading.Timer(delay, self._enqueue_unless_closed, (task_id,))
        timer.daemon = True
        timer.start()

    def _enqueue_unless_closed(self, task_id: str) -> None:
        # Shut down meanwhile: the task stays released, and the next start's
        # reaper finds it.
        if not self._closed.is_set():
            self.enqueue(task_id)

    def backlog(self) -> list[Backlog]:
        """The tasks queued in this process that no thread has taken yet."""
        queued = list(self._queued_at)
        age = max(0.0, time.time() - queued[0]) if queued else None
        return [Backlog(self._settings.queue, len(queued), age)]

    def revoke(self, task_id: str) -> None:
        log.info("task %s: canceled; a running call finishes, its result is dropped", task_id)

    def check(self) -> None:
        if self._closed.is_set():
            raise BrokerError("the in-process worker is shutting down")

    def close(self, timeout: float = 10.0) -> bool:
        """Stop taking work, let running tasks finish for up to `timeout`
        seconds; True if every thread ended. Queued tasks stay `submitted`."""
        self._closed.set()
        if self._slots is not None:
            self._slots.stop()
        if self._presence is not None:
            self._presence.stop()
        for _ in self._threads:
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(thread.is_alive() for thread in self._threads)

    def _work(self) -> None:
        while (queued := self._queue.get()) is not None:
            with contextlib.suppress(IndexError):  # taken: no longer waiting
                self._queued_at.popleft()
            if self._closed.is_set():
                continue  # drain without running: shutting down
            task_id, queued_by, trace_context, sent = queued
            binding = bind(request=queued_by, task=task_id)
            try:
                with within(trace_context):
                    self._deliver(task_id, sent)
            finally:
                binding.release()

    def _deliver(self, task_id: str, sent: float) -> None:
        """Run one queued task and make room after it, its ids bound."""
        try:
            state = observed_fulfil(
                self._store,
                task_id,
                self._agent,
                self._settings,
                run_async=self._run_async,
                send_later=self.enqueue_later,
                sent=sent,
            )
        except Exception:
            log.exception("task %s: fulfilment crashed", task_id)
            return
        if self.turns is not None:
            try:
                self.turns.delivered(task_id, state)
            except Exception:  # the reaper's sweep settles it
                log.exception("task %s: could not make room after it", task_id)
