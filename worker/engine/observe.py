"""What a worker tells an operator about each delivery: a log line and the
fulfilment metrics.

`observed_fulfil` is `worker.engine.fulfil.fulfil` plus that; the Celery task and
the in-process dispatcher both call it, each with the task id and the
request id that created it bound to its log lines (`worker.runtime.signals`
for Celery, the dispatcher's own thread for the in-process one). Only a delivery that ran the
function (the one that claimed the task) is counted: a duplicate or
redelivered message that finds the task taken counts nothing.
"""

from __future__ import annotations

import logging
import time

from shared.documents import Documents
from shared.ops.fleet_tally import count_outcome
from shared.ops.logs import fields
from shared.ops.tracing import span
from shared.settings import Settings
from shared.store.contract import Store
from shared.store.wiring import abilities_of
from shared.task import FAILED
from worker.engine.agent import Agent
from worker.engine.calling import RunAsync, run_async
from worker.engine.fulfil import fulfil
from worker.engine.metrics import outcome_of, worker_metrics
from worker.engine.retries import SendLater

log = logging.getLogger(__name__)


def observed_fulfil(
    store: Store,
    task_id: str,
    agent: Agent,
    settings: Settings,
    *,
    timeout_errors: tuple[type[BaseException], ...] = (),
    io_pool: bool = False,
    run_async: RunAsync = run_async,
    send_later: SendLater | None = None,
    sent: float | None = None,
) -> str:
    """`fulfil`, logged and counted when this delivery ran the function;
    `sent` is when its message was handed to the workers (seconds since the
    epoch; None: unknown), for the fleet tally's send-to-outcome latency."""
    started: list[float] = []
    running = worker_metrics().running

    def on_run() -> None:
        started.append(time.monotonic())
        running.inc()

    attributes = {"toolnexus.task_id": task_id, "toolnexus.run": settings.run or ""}
    try:
        with span("agent", attributes):
            state = fulfil(
                store,
                task_id,
                agent,
                settings,
                timeout_errors=timeout_errors,
                on_run=on_run,
                io_pool=io_pool,
                run_async=run_async,
                send_later=send_later,
            )
    finally:
        if started:
            running.dec()
    # With no function to run, the claiming delivery fails the task itself.
    ran = bool(started) or (agent.run is None and state == FAILED)
    if ran:
        seconds = time.monotonic() - started[0] if started else 0.0
        fulfilments, fulfilment_seconds = outcome_of(state or "unknown")
        fulfilments.inc()
        fulfilment_seconds.observe(seconds)
        documents = _tallied.documents(store)
        if documents is not None:
            latency = None if sent is None else time.time() - sent
            count_outcome(documents, state or "unknown", latency)
        if log.isEnabledFor(logging.INFO):
            log.info(
                "task %s: %s after %.3f s",
                task_id,
                state,
                seconds,
                extra=fields(outcome=state, duration_ms=round(seconds * 1000, 1)),
            )
    return state


class _Tallied:
    """The small documents of the store this process runs tasks on, read
    once (a worker process has one store), where its runs are tallied."""

    def __init__(self) -> None:
        self._store: Store | None = None
        self._documents: Documents | None = None

    def documents(self, store: Store) -> Documents | None:
        if store is not self._store:
            self._store, self._documents = store, abilities_of(store).documents
        return self._documents


_tallied = _Tallied()
