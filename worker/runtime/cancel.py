"""Stopping every delivery of a canceled task that a worker holds.

CancelTask saves `canceled` first, then asks the workers to stop the call
(`shared.broker.dispatch`). Celery's `revoke(id, terminate=True)` finds a
running message by its Celery id alone, but a task may be running under
another id than its own (a message the reaper sent again,
`shared.broker.dispatcher.resend_id`), or under its own id shared with a copy
(a broker's redelivery). So the workers register this command, which finds
the deliveries of the task by what they were asked to fulfil (the A2A task
id, the task's one argument) among all the requests the worker holds, and
terminates each the way Celery's revoke does: a started one at once (prefork
kills its pool process; in the I/O pools the call's watch has already
stopped it, worker.runtime.pools), one not started yet as soon as it starts.

It reads Celery's worker registry (`celery.worker.state`) and the Request
API; tests/test_worker_cancel.py fails by name if those move.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from celery.worker import state as worker_state
from celery.worker.control import control_command

from shared.broker.dispatcher import CANCEL_COMMAND, FULFIL_TASK

log = logging.getLogger(__name__)

# A registry copied while a pool thread changes it raises; one more try sees it settled.
SNAPSHOT_TRIES = 5


def _snapshot(requests: Iterable[Any]) -> list[Any]:
    for _ in range(SNAPSHOT_TRIES - 1):
        try:
            return list(requests)
        except RuntimeError:  # changed size during iteration (the thread pool)
            continue
    return list(requests)


def deliveries_of(task_id: str) -> list[Any]:
    """The requests this worker has (reserved or running) to fulfil `task_id`."""
    requests = {
        *_snapshot(worker_state.reserved_requests),
        *_snapshot(worker_state.active_requests),
    }
    return [
        request
        for request in requests
        if request.name == FULFIL_TASK and list(request.args[:1]) == [task_id]
    ]


def register_cancel() -> None:
    """Make `CANCEL_COMMAND` a remote control command of this process's workers
    (Celery keeps one registry per process; registering again replaces it)."""
    control_command(name=CANCEL_COMMAND, args=[("task_id", str)], signature="<task_id>")(
        cancel_deliveries
    )


def cancel_deliveries(state: Any, task_id: str, **_: Any) -> dict[str, str]:
    """Terminate every delivery of a canceled task, whatever its Celery id."""
    stopped = []
    for request in deliveries_of(task_id):
        try:
            request.terminate(state.consumer.pool)
        except Exception:  # one that cannot be stopped must not spare the others
            log.exception("task %s: could not terminate delivery %s", task_id, request.id)
            continue
        stopped.append(request.id)
    if stopped:
        log.info("task %s canceled: terminated %s", task_id, ", ".join(sorted(stopped)))
    return {"ok": f"terminated {len(stopped)} delivery(ies) of {task_id}"}
