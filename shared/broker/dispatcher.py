"""How the front end hands work to workers without importing them.

The web process enqueues by task *name*, so it needs none of the agent's
dependencies; the Celery worker registers a task under the same name, and
the embedded launcher supplies an in-process dispatcher instead.
"""

from __future__ import annotations

import uuid
from typing import Final, Protocol

FULFIL_TASK = "toolnexus.fulfil"
REAP_TASK = "toolnexus.reap_stale"
PUSH_TASK = "toolnexus.push"  # one delivery run for a (task, webhook)
PUSH_SWEEP_TASK = "toolnexus.push_sweep"  # run by beat itself, like the reaper
# The workers' remote control command that stops every delivery of a task (worker.runtime.cancel).
CANCEL_COMMAND = "toolnexus_cancel"
RESEND_MARK: Final = "-resend-"


def resend_id(task_id: str) -> str:
    """The Celery id of another message for `task_id` (the reaper's resends).

    The first message goes under the task's own id; a copy under the same id
    would share the entry Celery's worker keeps each message under, and
    finishing as a no-op it would take the running one's entry with it, so a
    revoke would no longer find that one. Starting with the task id, a resend
    is listed beside the first message in Flower and named as a resend.
    """
    return f"{task_id}{RESEND_MARK}{uuid.uuid4().hex[:12]}"


class Dispatcher(Protocol):
    def enqueue(self, task_id: str) -> None:
        """Queue fulfilment of a saved task; raise BrokerError if it cannot."""

    def revoke(self, task_id: str) -> None:
        """Best effort: stop a queued or running fulfilment of a canceled task."""

    def check(self) -> None:
        """Raise BrokerError when work could not be enqueued right now."""


def is_resend(celery_id: str, task_id: str) -> bool:
    """Whether the message with `celery_id` for `task_id` is one of the reaper's resends."""
    return celery_id.startswith(task_id + RESEND_MARK)
