"""What the JSON-RPC methods do, on stored-shape tasks; no wire format here.

Creating a task is `new_task` + `save`; every later change (continue,
cancel, failing a task that could not be queued) is a
`shared.transitions.transition`, so it obeys the one state machine and
never overwrites a terminal state a worker wrote first.
"""

from __future__ import annotations

import logging
import time

from shared.dispatch import Dispatcher
from shared.errors import InvalidTransition, TaskNotCancelable, TaskNotFound
from shared.loading import load_object
from shared.settings import Settings
from shared.store import TaskStore
from shared.task import (
    CANCELED,
    FAILED,
    INPUT_REQUIRED,
    SUBMITTED,
    Task,
    agent_message,
    is_terminal,
    new_task,
    state_of,
    with_status,
)
from shared.transitions import OnTerminal, transition
from web.errors import BROKER_UNAVAILABLE, InvalidParams, TaskError
from web.params import SendParams, TaskQuery

log = logging.getLogger(__name__)


class Tasks:
    def __init__(self, settings: Settings, store: TaskStore, dispatcher: Dispatcher) -> None:
        self.store = store
        self.dispatcher = dispatcher
        self._blocking_timeout = settings.blocking_timeout
        # Imported now, so a bad TOOLNEXUS_ON_TASK stops start-up instead of
        # surfacing as a logged error on every cancel.
        self._hook: OnTerminal | None = (
            load_object(settings.on_task, "TOOLNEXUS_ON_TASK") if settings.on_task else None
        )

    def send(self, params: SendParams, *, blocking: bool) -> Task:
        if params.task_id is None:
            task = self.store.save(new_task(params.message, params.context_id))
        else:
            task = self._resume(params)
        self._enqueue(task)
        return with_history(self._settle(task) if blocking else task, params.history_length)

    def get(self, query: TaskQuery) -> Task:
        return with_history(self._load(query.task_id), query.history_length)

    def cancel(self, task_id: str) -> Task:
        outcome = transition(
            self.store, task_id, lambda task: with_status(task, CANCELED), on_terminal=self._hook
        )
        if outcome.task is None:
            raise TaskNotFound(f"task {task_id} not found")
        if not outcome.applied:
            raise TaskNotCancelable(
                f"task {task_id} is {state_of(outcome.task)}; it can no longer be canceled"
            )
        try:
            self.dispatcher.revoke(task_id)
        except Exception:  # the stored `canceled` already wins over a late worker
            log.warning("could not revoke task %s", task_id, exc_info=True)
        return outcome.task

    def _load(self, task_id: str) -> Task:
        task = self.store.get(task_id)
        if task is None:
            raise TaskNotFound(f"task {task_id} not found")
        return task

    def _resume(self, params: SendParams) -> Task:
        assert params.task_id is not None
        task_id = params.task_id

        def resume(task: Task) -> Task:
            if params.context_id and params.context_id != task.get("contextId"):
                raise InvalidParams(
                    f"message.contextId does not match task {task_id}'s context",
                    field="message.contextId",
                )
            history = list(task.get("history") or [])
            # Keep the agent's question in the conversation before the answer.
            prompt = task.get("status", {}).get("message")
            if isinstance(prompt, dict) and prompt not in history:
                history.append(prompt)
            reply = {**params.message, "taskId": task_id, "contextId": task.get("contextId")}
            return with_status({**task, "history": [*history, reply]}, SUBMITTED)

        outcome = transition(self.store, task_id, resume)
        if outcome.task is None:
            raise TaskNotFound(f"task {task_id} not found")
        if not outcome.applied:
            raise InvalidTransition(
                f"task {task_id} is {state_of(outcome.task)}:"
                " only an input-required task accepts a follow-up message"
            )
        return outcome.task

    def _enqueue(self, task: Task) -> None:
        """Queue fulfilment; if that fails the task is failed with the reason,
        so no task is ever left `submitted` with nothing queued for it."""
        try:
            self.dispatcher.enqueue(task["id"])
        except Exception as error:
            reason = f"{BROKER_UNAVAILABLE}: the task could not be queued ({error})"
            failed = agent_message(reason, taskId=task["id"], contextId=task.get("contextId"))
            transition(
                self.store,
                task["id"],
                lambda current: with_status(current, FAILED, message=failed),
                on_terminal=self._hook,
            )
            raise TaskError(error, task["id"]) from error

    def _settle(self, task: Task) -> Task:
        """Poll until the task is terminal or waits for input, or until the
        blocking bound passes; then return it as it stands."""
        deadline = time.monotonic() + self._blocking_timeout
        interval = 0.005
        while True:
            current = self.store.get(task["id"]) or task
            state = state_of(current)
            remaining = deadline - time.monotonic()
            if is_terminal(state) or state == INPUT_REQUIRED or remaining <= 0:
                return current
            time.sleep(min(interval, remaining))
            interval = min(interval * 2, 0.1)


def with_history(task: Task, history_length: int | None) -> Task:
    """historyLength: None keeps all, 0 drops the field, N keeps the last N."""
    if history_length is None or "history" not in task:
        return task
    if history_length == 0:
        return {key: value for key, value in task.items() if key != "history"}
    history = task["history"]
    return {**task, "history": history[-history_length:] if isinstance(history, list) else []}
