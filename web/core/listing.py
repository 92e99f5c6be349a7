"""ListTasks (A2A 1.0): the caller's tasks, newest status first, in pages.

The store answers (see `shared.store.listing`): natively when it can read just
the page (Redis, PostgreSQL), else by reading all its tasks (memory, file,
any store with `all()`); any other store answers UnsupportedOperation. The page token
carries the moment the listing began and the position of the last task
shown, so the pages of one listing hold still while tasks change.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.errors import Unsupported
from shared.store.contract import Store
from shared.store.listing import WINDOW, Listing, Position, Query
from shared.task import Task
from web.core.errors import InvalidParams, UnsupportedOperation
from web.core.params import ListQuery
from web.core.tasks import with_history

# How far ahead of this front end's clock another's may run: a page token
# it issued may start that much in the future here.
CLOCK_SKEW = 5.0


@dataclass(frozen=True)
class Page:
    tasks: list[Task]
    next_page_token: str
    page_size: int
    total_size: int


def list_tasks(store: Store, query: ListQuery, owner: str) -> Page:
    as_of, after = _decode(query.page_token) if query.page_token else (time.time(), None)
    if time.time() - as_of > WINDOW:
        raise InvalidParams(
            "pageToken has expired (a listing's pages hold still for"
            f" {WINDOW:g} s): list again from the first page",
            field="pageToken",
        )
    updated_after = None
    if query.updated_after:
        updated_after = _instant(query.updated_after, "statusTimestampAfter").timestamp()
    wanted = Query(
        owner, query.context_id, query.state, updated_after, query.page_size, as_of, after
    )
    listing = _answer(store, wanted)
    token = _encode(as_of, listing.last) if listing.last is not None else ""
    shown = [_shape(task, query) for task in listing.tasks]
    return Page(shown, token, query.page_size, listing.total)


def _answer(store: Store, query: Query) -> Listing:
    try:
        return store.listing(query)
    except Unsupported as error:
        raise UnsupportedOperation(f"ListTasks: {error}") from None


def _shape(task: Task, query: ListQuery) -> Task:
    if not query.include_artifacts:
        task.pop("artifacts", None)
    return with_history(task, query.history_length)


def _instant(text: str, field: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidParams(f"{field} must be an ISO 8601 timestamp", field=field) from None
    if moment.tzinfo is None:
        raise InvalidParams(f"{field} must carry a time zone (e.g. 'Z')", field=field)
    return moment


def _encode(as_of: float, last: Position) -> str:
    return base64.urlsafe_b64encode(json.dumps([as_of, *last]).encode()).decode()


def _decode(token: str) -> tuple[float, Position]:
    try:
        value: Any = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, binascii.Error, RecursionError):  # "[[[[…": too deep for json
        value = None
    if not (
        isinstance(value, list)
        and len(value) == 3
        and all(isinstance(v, float | int) and not isinstance(v, bool) for v in value[:2])
        and all(math.isfinite(v) for v in value[:2])
        # A listing's moment is recorded by the store, which stamps every later
        # status after it: a moment from the future would move every task's time.
        and value[0] <= time.time() + CLOCK_SKEW
        and isinstance(value[2], str)
    ):
        raise InvalidParams("pageToken is not a token this server issued", field="pageToken")
    return float(value[0]), (float(value[1]), value[2])
