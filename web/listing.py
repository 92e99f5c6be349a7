"""ListTasks (A2A 1.0): filter, newest first, cursor pages.

Needs a store with `all()` (`shared.store.ListableStore`: every built-in
store has it); with any other store the method answers UnsupportedOperation.
The cursor is the (status timestamp, id) of the last task on a page, so a
task saved between two page requests never shifts a later page.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.store import ListableStore, TaskStore
from shared.task import Task, state_of
from web.errors import InvalidParams, UnsupportedOperation
from web.methods import with_history
from web.params import ListQuery

Cursor = tuple[str, str]


@dataclass(frozen=True)
class Page:
    tasks: list[Task]
    next_page_token: str
    page_size: int
    total_size: int


def list_tasks(store: TaskStore, query: ListQuery, owner: str) -> Page:
    if not isinstance(store, ListableStore):
        raise UnsupportedOperation(
            "ListTasks needs a task store that can list its tasks (memory, file or Redis)"
        )
    after = _instant(query.updated_after, "statusTimestampAfter") if query.updated_after else None
    cursor = _decode(query.page_token) if query.page_token else None
    matching = [
        task
        for task in store.all().values()
        if task.get("owner", "") == owner and _matches(task, query, after)
    ]
    matching.sort(key=_position, reverse=True)
    remaining = [task for task in matching if cursor is None or _position(task) < cursor]
    page = remaining[: query.page_size]
    token = _encode(_position(page[-1])) if len(remaining) > len(page) else ""
    shown = [_shape(task, query) for task in page]
    return Page(shown, token, query.page_size, len(matching))


def _matches(task: Task, query: ListQuery, after: datetime | None) -> bool:
    if query.context_id is not None and task.get("contextId") != query.context_id:
        return False
    if query.state is not None and state_of(task) != query.state:
        return False
    if after is not None:
        stamp = _timestamp(task)
        try:
            return _instant(stamp, "") > after
        except InvalidParams:
            return False
    return True


def _shape(task: Task, query: ListQuery) -> Task:
    if not query.include_artifacts:
        task.pop("artifacts", None)
    return with_history(task, query.history_length)


def _timestamp(task: Task) -> str:
    status = task.get("status")
    stamp = status.get("timestamp") if isinstance(status, dict) else None
    return stamp if isinstance(stamp, str) else ""


def _position(task: Task) -> Cursor:
    return (_timestamp(task), str(task.get("id", "")))


def _instant(text: str, field: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidParams(f"{field} must be an ISO 8601 timestamp", field=field) from None
    if moment.tzinfo is None:
        raise InvalidParams(f"{field} must carry a time zone (e.g. 'Z')", field=field)
    return moment


def _encode(cursor: Cursor) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(cursor)).encode()).decode()


def _decode(token: str) -> Cursor:
    try:
        value: Any = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, binascii.Error, RecursionError):  # "[[[[…": too deep for json
        value = None
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise InvalidParams("pageToken is not a token this server issued", field="pageToken")
    return (value[0], value[1])
