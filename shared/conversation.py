"""A context's earlier exchange, as an agent that keeps a conversation reads it.

A follow-up task in a context continues the conversation on any worker, so
the earlier exchange is read from the store, never from a worker's memory:
each earlier task of the context (the caller's own, by the store's listing,
oldest first) gives its messages, and its result as an agent message where
its history does not end with one; then the task's own messages before its
latest user message. Only the newest `MOST_TASKS` tasks of a context are
read: a conversation longer than that starts from there.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final, cast

from shared.errors import Unsupported
from shared.mappings import is_mapping
from shared.store.contract import Store
from shared.store.listing import Query
from shared.task import SUBMITTED, WORKING, Message, Part, Task, epoch, state_of

# Earlier tasks of a context read at most (one listing page).
MOST_TASKS: Final = 100


def conversation(store: Store, task: Mapping[str, Any]) -> list[Message]:
    """The messages before `task`'s latest user message, oldest first: its
    context's earlier tasks' exchanges, then its own earlier turns. A store
    that keeps no listing gives the task's own turns only."""
    return [*_earlier_tasks(store, task), *_own_turns(task)]


def _earlier_tasks(store: Store, task: Mapping[str, Any]) -> list[Message]:
    context_id = task.get("contextId")
    if not isinstance(context_id, str) or not context_id:
        return []
    query = Query(str(task.get("owner", "")), context_id, None, None, MOST_TASKS, time.time(), None)
    try:
        listed = store.listing(query).tasks
    except Unsupported:
        return []
    mine = _status_time(task)
    # A task still running beside this one has no answer yet to continue from.
    earlier = [
        other
        for other in listed
        if other["id"] != task.get("id")
        and state_of(other) not in (SUBMITTED, WORKING)
        and _status_time(other) <= mine
    ]
    earlier.sort(key=lambda other: (_status_time(other), other["id"]))
    messages: list[Message] = []
    for other in earlier:
        messages.extend(_exchange(other))
    return messages


def _exchange(task: Task) -> list[Message]:
    """A task's messages, with its result as the agent's answer where its
    history does not end with one."""
    history = cast(list[Message], [m for m in task.get("history") or [] if is_mapping(m)])
    if history and history[-1].get("role") == "agent":
        return list(history)
    parts = [
        cast(Part, part)
        for artifact in task.get("artifacts") or []
        for part in artifact.get("parts") or []
        if is_mapping(part) and part.get("kind") in ("text", "data")
    ]
    if not parts:
        return list(history)
    answer: Message = {
        "kind": "message",
        "role": "agent",
        "messageId": f"{task['id']}-result",
        "parts": parts,
    }
    return [*history, answer]


def _own_turns(task: Mapping[str, Any]) -> list[Message]:
    """The task's history before its latest user message."""
    history = cast(list[Message], [m for m in task.get("history") or [] if is_mapping(m)])
    for index in range(len(history) - 1, -1, -1):
        if history[index].get("role") == "user":
            return history[:index]
    return history


def _status_time(task: Mapping[str, Any]) -> float:
    stamp = (task.get("status") or {}).get("timestamp")
    return epoch(stamp) if isinstance(stamp, str) else 0.0
