"""A send's per-owner limits as the handler applies them (`shared.owners.admission`).

Every send takes a token of its owner's rate before anything is saved. A
send that would create a task reserves a slot among the owner's unfinished
tasks for the task's id, before the store's create; a slot no task took is
given back. At the cap, a retry of a message already accepted (whose task
the caller has not moved on from) goes through without one: it makes no
new task.
"""

from __future__ import annotations

import logging

from shared.errors import OwnerLimitExceeded, StoreError
from shared.owners.admission import Admission
from shared.store.contract import Store
from shared.task import Message, is_terminal, state_of
from web.core.finished import FinishedTasks
from web.core.retries import moved_on

log = logging.getLogger(__name__)


class SendLimits:
    def __init__(self, admission: Admission, store: Store, finished: FinishedTasks | None) -> None:
        self.admission = admission
        self._store = store
        self._finished = finished

    def take(self, owner: str) -> None:
        """A token of the owner's rate, or the refusal."""
        self.admission.take(owner)

    def reserve(self, owner: str, task_id: str, key: str | None, message: Message) -> bool:
        """A slot for `task_id`, the task this send would create: True when
        one was reserved. A reservation whose create fails on the store is
        kept: the check at the cap drops it once its task is found missing."""
        try:
            return self.admission.reserve(owner, task_id, self._finished_or_gone)
        except OwnerLimitExceeded:
            if key is not None and self._repeats(key, message):
                return False
            raise

    def unreserve(self, owner: str, task_id: str) -> None:
        """Give back a slot no task took; should that fail, the check at the
        cap drops it later (its task is never found)."""
        try:
            self.admission.release(owner, task_id)
        except StoreError:
            log.warning("task %s: could not give back its owner's slot", task_id)

    def _repeats(self, key: str, message: Message) -> bool:
        """`message` repeats one this caller sent before, whose task stands."""
        earlier = self.admission.accepted(key)
        task = self._store.get(earlier) if earlier is not None else None
        return task is not None and not moved_on(task, message)

    def _finished_or_gone(self, task_id: str) -> bool | None:
        """Whether the task is finished; None when the store has no such task."""
        if self._finished is not None and self._finished.get(task_id) is not None:
            return True
        task = self._store.get(task_id)
        return None if task is None else is_terminal(state_of(task))
