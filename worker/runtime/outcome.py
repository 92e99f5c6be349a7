"""What Celery (and so Flower) records for one delivery of `toolnexus.fulfil`.

The A2A outcome is saved in the task store first; only then is it told to
Celery, so nothing here can lose or change a result:

| A2A state after the delivery      | Celery / Flower                                   |
|-----------------------------------|---------------------------------------------------|
| completed, input-required, auth-required | SUCCESS, the result is the state        |
| failed, rejected                  | FAILURE, `TaskFailed(<the reason in the task>)`   |
| canceled                          | REVOKED                                           |
| not in the store                  | FAILURE, `TaskFailed(not in the task store …)`    |
| working, message redelivered      | RETRY, then what the task is once reaped          |
| working, a resend (another delivery runs it) | SUCCESS, the result says another message runs it |
| working (another delivery runs it) | nothing more: that delivery reports            |

A FAILURE is an ordinary exception, so with late acks the message is
acknowledged (`task_acks_on_failure_or_timeout`) and never redelivered, and
the task retries only on StoreError. REVOKED is what Celery itself reports
when a revoke reaches the worker before or while the task runs; a delivery
that finds the task canceled anyway (the revoke reached no live worker)
announces `task-revoked` itself and ends with Ignore, which acknowledges
the message and sends no other event.

A resend (the reaper's copy, under a Celery id of its own,
`shared.broker.dispatcher.resend_id`) that finds its task taken is its own entry
in Flower, which would otherwise show it STARTED for good: it ends as a
success saying who runs the task. A copy under the task's own id reports
nothing, so as not to end the entry of the delivery that runs it.

A redelivered message that finds its task `working` came back because the
delivery running it died (a killed pool process: reject on worker lost).
Nobody else would tell Celery how that task ends, so this delivery looks
again once the reaper has had time to fail it (a retry, which only reads).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from celery.exceptions import Ignore

from shared.errors import StoreError
from shared.quoting import truncated
from shared.task import (
    AUTH_REQUIRED,
    CANCELED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    REJECTED,
    WORKING,
    Task,
    message_text,
)

SUCCEEDED: Final = frozenset({COMPLETED, INPUT_REQUIRED, AUTH_REQUIRED})
FAILED_STATES: Final = frozenset({FAILED, REJECTED})
REASON_LIMIT: Final = 500


class TaskFailed(Exception):
    """The A2A task ended failed or rejected; the message is its reason.
    Raised after the outcome is saved, so Celery records a FAILURE."""


def not_in_store(task_id: str) -> str:
    return (
        f"task {task_id} is not in the task store: it expired, or this worker's"
        " TOOLNEXUS_STORE is not the one the front end uses"
    )


def reason_of(task: Task | None, state: str) -> str:
    """The failure reason the task carries (its status message), with its state."""
    message = task["status"].get("message") if task is not None else None
    text = message_text(message) if message is not None else ""
    reason = f"{state}: {text}" if text else state
    return truncated(reason, REASON_LIMIT)


def celery_result(
    task_id: str,
    state: str,
    read: Callable[[], Task | None],
    announce_revoked: Callable[[], None],
    *,
    redelivered: bool = False,
    resent: bool = False,
    recheck: Callable[[], None] = lambda: None,
) -> str:
    """The Celery task's return value for a delivery that left `task_id` in
    `state`; raises TaskFailed or Ignore for the outcomes that are no success.
    `read` loads the task (for a failure's reason), `announce_revoked` sends
    the task-revoked event, `recheck` raises Celery's Retry to look again
    later (for a `redelivered` message that finds its task `working`);
    `resent`: the delivery is one of the reaper's resends."""
    if state in SUCCEEDED:
        return state
    if state in FAILED_STATES:
        try:
            task = read()
        except StoreError:  # the outcome is saved; only its wording is lost
            task = None
        raise TaskFailed(reason_of(task, state))
    if state == CANCELED:
        announce_revoked()
        raise Ignore()
    if not state:
        raise TaskFailed(not_in_store(task_id))
    if state == WORKING and redelivered:
        recheck()
    if resent:
        return f"{state}: another message of the task runs it"
    # `working` or `submitted`: another delivery holds it and will report.
    raise Ignore()
