"""Running a failed task again: a new task, never the failed one changed.

A rerun sends the failed task's first user message again, as its owner, in
its context, through the same path as any send (`Tasks.accept`: the owner's
send limits, the context's policy, the turn book, the broker). The message
gets a new `messageId` and `referenceTaskIds` naming the failed task, which
stays `failed`: a terminal state never changes.

The new message id is derived from the failed task's id, so asking twice
(a double click, a command run again after a lost reply) makes one rerun
where sends are idempotent (TOOLNEXUS_IDEMPOTENT_SENDS, the default): the
second ask answers with the task the first made. To try again after a
rerun failed too, rerun that one.

Who may: the task's owner reruns their own failed task (the same message
they could send again themselves); an administrator (TOOLNEXUS_ADMIN_TOKENS)
reruns anyone's, and the new task is the owner's, as the failed one was.
A task the caller may not rerun does not exist for them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Final, cast

from shared.errors import InvalidTransition, TaskNotFound
from shared.task import FAILED, Message, Task, state_of
from web.core.params import SendParams
from web.core.tasks import Tasks, owns

# Names the rerun message ids, one per failed task.
_RERUNS: Final = uuid.UUID("5f0c7e9e-1d6b-4c55-9d8e-6f4b8a0f2a31")
# What the first message carried that is the failed task's own.
_NOT_KEPT: Final = frozenset({"taskId", "messageId", "referenceTaskIds"})


@dataclass(frozen=True)
class Rerun:
    """`task`: the new task as it stands; `repeated`: an earlier rerun of
    the same failed task made it."""

    task: Task
    repeated: bool


def rerun(tasks: Tasks, task_id: str, caller: str, *, admin: bool) -> Rerun:
    """Send `task_id`'s first message again as a new task; raises
    TaskNotFound (not there, or not the caller's), InvalidTransition (not
    failed, or with no user message to send), or what a send raises."""
    failed = tasks.store.get(task_id)
    if failed is None or not (admin or owns(failed, caller)):
        raise TaskNotFound(f"task {task_id} not found")
    if state_of(failed) != FAILED:
        raise InvalidTransition(
            f"task {task_id} is {state_of(failed)}: only a failed task is run again"
        )
    message = again(failed)
    params = SendParams(
        message=message,
        task_id=None,
        context_id=failed.get("contextId"),
        blocking=False,
        history_length=None,
    )
    sent = tasks.accept(params, failed.get("owner", ""))
    return Rerun(sent.task, sent.repeated)


def again(failed: Task) -> Message:
    """The message a rerun of `failed` sends: its first user message, with a
    message id of the rerun's own and a reference to the failed task."""
    first = next(
        (message for message in failed.get("history") or [] if message.get("role") == "user"),
        None,
    )
    if first is None:
        raise InvalidTransition(f"task {failed['id']} has no user message to send again")
    kept = {key: value for key, value in first.items() if key not in _NOT_KEPT}
    message = cast(Message, kept)
    message["messageId"] = str(uuid.uuid5(_RERUNS, failed["id"]))
    message["referenceTaskIds"] = [failed["id"]]
    if "contextId" in failed:
        message["contextId"] = failed["contextId"]
    return message
