"""Runs a worker loses, handed back at once instead of after the stale threshold.

Two moments a Celery worker's main process knows a run of its own ends
without an outcome (`worker.engine.retries.hand_back`, while attempts remain):

- **A pool process dies under a run** (SIGKILL, out of memory): the main
  process sees it, by a look at its running requests' processes every
  `WATCH_EVERY` seconds, or by Celery's `WorkerLostError` on the request,
  whichever comes first (Celery's own look can take five seconds). The run
  that process held (its `<pid>@<host>` in the task's run record) is ended
  there and then: its next attempt starts within the backoff, not after the
  stale threshold. The message still comes back (reject on worker lost);
  the copy finds the task released or taken and does no harm.
- **A drain runs out of time**: on SIGTERM the worker takes no new task and
  lets running ones finish for up to `TOOLNEXUS_DRAIN_TIMEOUT`; then each
  run still going is handed back and cancelled (Celery's own cancel of
  unacknowledged requests, whose messages the broker delivers again), so a
  rolling deploy or a node drain costs an attempt, not a failure. A run on
  its last attempt, and every run with one attempt, is waited for, as
  Celery's warm shutdown always has.

Celery's internals this reads are checked by name in
`tests/test_attempts.py` (`celery.worker.state.active_requests`, a request's
`worker_pid`, `args`, `name` and `cancel`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from billiard.einfo import ExceptionWithTraceback
from celery import bootsteps
from celery.exceptions import WorkerLostError
from celery.worker import state
from celery.worker.request import Request

from shared.attempts import process_name
from shared.broker.dispatcher import FULFIL_TASK

log = logging.getLogger(__name__)

# Called with the task id, the pool process that ran it and why its run
# ended; True when it handed the task back.
OnLost = Callable[[str, int, str], bool]

POOL_PROCESS_LOST = "the worker process running it was lost"
# Seconds between looks at the pool processes running fulfilments.
WATCH_EVERY = 0.2
DRAINED = "its worker shut down before it finished"


def lost_requests(on_lost: OnLost) -> type[Request]:
    """The fulfil task's request class: a pool process lost under it is
    reported to `on_lost` before Celery gives the message back (so the copy
    that comes back finds the task released, and leaves it to the message
    queued for when its backoff ends)."""

    class FulfilRequest(Request):  # type: ignore[misc]
        def on_failure(
            self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False
        ) -> Any:
            error = exc_info.exception
            if isinstance(error, ExceptionWithTraceback):
                error = error.exc
            if isinstance(error, WorkerLostError) and self.worker_pid and self.args:
                task_id = str(self.args[0])
                try:
                    on_lost(task_id, int(self.worker_pid), POOL_PROCESS_LOST)
                except Exception:
                    log.exception("task %s: could not hand it back (the reaper will)", task_id)
            return super().on_failure(exc_info, send_failed_event, return_ok)

    return FulfilRequest


def handing_back(timeout: float, on_lost: OnLost) -> type[bootsteps.StartStopStep]:
    """A worker bootstep that watches the pool processes running fulfilments
    (`WATCH_EVERY`) and hands a dead one's run to `on_lost`; and, as the
    worker stops, waits up to `timeout` seconds for its running fulfilments,
    then hands each still running to `on_lost` and cancels those it handed
    back."""

    class HandBack(bootsteps.StartStopStep):  # type: ignore[misc]
        requires = ("celery.worker.components:Pool",)

        def __init__(self, worker: Any, **kwargs: Any) -> None:
            super().__init__(worker, **kwargs)
            self.watching = threading.Event()

        def start(self, worker: Any) -> None:
            self.watching.set()
            threading.Thread(
                target=_watch,
                args=(self.watching, on_lost),
                name="toolnexus-pool-watch",
                daemon=True,
            ).start()

        def stop(self, worker: Any) -> None:
            self.watching.clear()
            deadline = time.monotonic() + timeout
            while _running() and time.monotonic() < deadline:
                time.sleep(0.1)
            running = _running()
            if not running:
                return
            log.warning(
                "worker stopping: %d task(s) still running after %g s, handed back",
                len(running),
                timeout,
            )
            for request in running:
                if not (request.worker_pid and request.args):
                    continue
                if on_lost(str(request.args[0]), int(request.worker_pid), DRAINED):
                    # Its message stays unacknowledged: the broker delivers it
                    # again, and that delivery takes the released task.
                    request.cancel(worker.pool, emit_retry=False)

    return HandBack


def _running() -> list[Any]:
    while True:
        try:
            requests = list(state.active_requests)
        except RuntimeError:  # changed size while copied, by the worker's loop
            continue
        return [request for request in requests if request.name == FULFIL_TASK]


def _watch(watching: threading.Event, on_lost: OnLost) -> None:
    """Every WATCH_EVERY seconds, each running fulfilment whose pool process
    is gone is handed back, once. Celery learns of a pool process's death
    from the process's exit only for the processes it started with, else on
    a five-second timer; this looks for itself."""
    handed: set[tuple[str, int]] = set()
    while watching.is_set():
        running = {
            (str(request.args[0]), int(request.worker_pid))
            for request in _running()
            if request.worker_pid and request.args
        }
        handed &= running  # those Celery has let go of meanwhile
        for task_id, pid in running - handed:
            if not _gone(pid):
                continue
            handed.add((task_id, pid))
            try:
                on_lost(task_id, pid, POOL_PROCESS_LOST)
            except Exception:
                log.exception("task %s: could not hand it back (the reaper will)", task_id)
        time.sleep(WATCH_EVERY)


def _gone(pid: int) -> bool:
    """Whether process `pid` has exited (gone, or a zombie its parent has
    not reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def holder_of(pid: int) -> str:
    """The holder name a pool process's runs carry (`shared.attempts`)."""
    return process_name(pid)
