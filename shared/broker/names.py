"""How the front end hands work to workers without importing them.

The web process enqueues by task *name*, so it needs none of the agent's
dependencies; the Celery worker registers a task under the same name, and
the embedded launcher supplies an in-process dispatcher instead.
"""

from __future__ import annotations

from typing import Protocol

FULFIL_TASK = "toolnexus.fulfil"
REAP_TASK = "toolnexus.reap_stale"
PUSH_TASK = "toolnexus.push"  # one delivery run for a (task, webhook)
PUSH_SWEEP_TASK = "toolnexus.push_sweep"  # run by beat itself, like the reaper


class Dispatcher(Protocol):
    def enqueue(self, task_id: str) -> None:
        """Queue fulfilment of a saved task; raise BrokerError if it cannot."""

    def revoke(self, task_id: str) -> None:
        """Best effort: stop a queued or running fulfilment of a canceled task."""

    def check(self) -> None:
        """Raise BrokerError when work could not be enqueued right now."""
