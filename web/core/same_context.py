"""The same-context policy as a send meets it (`shared.contexts` says what
each policy means): which one a message asks for, `reject`'s refusal and
`interrupt`'s list of tasks to cancel. A `queue` (and an `interrupt`) task
is only marked here: the worker's delivery waits for its context.

`reject` looks twice: before the task is made (the usual refusal, nothing
saved) and after (sends racing into a free context all pass the first look;
each then ends itself `rejected` if it finds another busy task there), so
that at most one of them runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from shared.contexts import (
    FIELD,
    INTERRUPT,
    POLICIES,
    QUEUE,
    policy_in,
)
from shared.errors import ContextBusy, Unsupported
from shared.store.busy import ahead_of, busy_in
from shared.store.contract import Store
from shared.task import Task, state_of
from web.core.errors import InvalidParams, UnsupportedOperation

FIELD_NAME = "message.metadata.toolnexus.sameContext"


def policy_of(message: Mapping[str, Any], default: str) -> str:
    """The policy `message` asks for, or the deployment's."""
    named = policy_in(message.get("metadata"))
    if named is None:
        return default
    if not isinstance(named, str) or named not in POLICIES:
        raise InvalidParams(f"{FIELD_NAME} must be one of {', '.join(POLICIES)}", field=FIELD_NAME)
    return named


def marked(task: Task, policy: str) -> Task:
    """The new task, carrying its policy where its start waits for its context."""
    if policy in (QUEUE, INTERRUPT):
        task[FIELD] = policy  # type: ignore[typeddict-unknown-key]
    return task


def refuse_if_busy(store: Store, owner: str, context_id: str | None) -> None:
    """`reject`'s first look: refused while any task of the context is busy."""
    # (A new context has nothing in it yet.)
    if context_id is not None and (error := _refusal(store, owner, context_id, None)):
        raise error


def refusal(store: Store, task: Task) -> ContextBusy | None:
    """`reject`'s second look, once the task is saved: the error that
    refuses it when any other task of its context is busy. Of sends racing
    into a free context, the one saved last sees all the others, so at most
    one is taken (all of them may be refused, each naming another)."""
    return _refusal(store, task.get("owner", ""), task["contextId"], task["id"])


def _refusal(store: Store, owner: str, context_id: str, itself: str | None) -> ContextBusy | None:
    """The refusal naming the first busy task of the context but `itself`;
    the listing is read no further than that task."""
    try:
        busy = next((t for t in busy_in(store, owner, context_id) if t["id"] != itself), None)
    except Unsupported:
        raise _cannot_list() from None
    return None if busy is None else _busy(busy, context_id)


def to_interrupt(store: Store, task: Task) -> list[Task]:
    """`interrupt`: the busy tasks of the context that the new one cancels."""
    return list(_listed(lambda: ahead_of(store, task)))


def _listed(tasks: Callable[[], Iterable[Task]]) -> list[Task]:
    try:
        return list(tasks())
    except Unsupported:
        raise _cannot_list() from None


def _cannot_list() -> UnsupportedOperation:
    return UnsupportedOperation(
        "this agent's task store keeps no listing, so a context's busy tasks cannot be"
        " found: only the sameContext policy parallel is available"
    )


def _busy(busy: Task, context_id: str) -> ContextBusy:
    return ContextBusy(
        f"context {context_id} is busy: task {busy['id']} is still {state_of(busy)}",
        task_id=busy["id"],
        context_id=context_id,
    )
