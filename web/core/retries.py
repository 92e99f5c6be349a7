"""What makes a send a retry of a message the caller already sent."""

from __future__ import annotations

from shared.task import CANCELED, Message, Task, latest_user_message, state_of


def is_latest(task: Task, message: Message) -> bool:
    """The caller's latest message to `task` is `message` (same id, same parts):
    sending it again is a retry, not a new word."""
    latest = latest_user_message(task)
    return (
        latest is not None
        and latest.get("messageId") == message["messageId"]
        and latest.get("parts") == message["parts"]
    )


def moved_on(task: Task, message: Message) -> bool:
    """The caller canceled `task`, or said more to it after `message`."""
    return state_of(task) == CANCELED or not is_latest(task, message)
