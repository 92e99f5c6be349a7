"""Listing a caller's tasks newest first, in pages that hold still.

A2A orders ListTasks by status timestamp, newest first, and tasks keep
changing status while a client pages through them. So every page of one
listing is read *as of* the moment its first page was asked for: a task
sits where its status timestamp was at that moment, a task that changed
since is still found there (its position then comes from its own history
of status changes), and a task created since is not listed. A task that
exists for the whole paging therefore appears exactly once. Each task is
shown as it stands now.

`Query` and `Listing` are the store-level shapes; `list_by_scan` answers a
query by reading every task: the definition every store's index is tested
against. The stores read only the page: the memory store from ordered indexes kept
in process (`shared.store.ordered`), the Redis store from its own
(`shared.stores.redis.listing`), the SQL stores from their tables
(`shared.stores.sql.listing`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from shared.events import Event
from shared.task import Task, TaskStatus, epoch, iso_at, state_of

# (status time in seconds since the epoch, task id): the sort key, newest first.
Position = tuple[float, str]
# (status time, state) of each status a task has had, oldest first.
StatusHistory = Sequence[tuple[float, str]]
# How long one listing's pages hold still: stores keep each task's status
# changes of the last WINDOW seconds (and the one before them), which is what
# placing a changed task as of a listing's moment needs; an older page token
# is refused, and the client lists again.
WINDOW = 600.0


def trimmed(history: list[tuple[float, str]], now: float) -> None:
    """Drop the changes older than WINDOW, which no listing needs,
    keeping the last of them: it is where the task stood when the window began."""
    while len(history) > 1 and history[1][0] < now - WINDOW:
        del history[0]


@dataclass(frozen=True)
class Query:
    owner: str
    context_id: str | None
    state: str | None
    updated_after: float | None  # only tasks whose status time is later
    size: int
    as_of: float  # when the first page of this listing was asked for
    after: Position | None  # the position of the previous page's last task


@dataclass(frozen=True)
class Listing:
    tasks: list[Task]
    total: int  # tasks matching the query, on every page
    last: Position | None  # where the next page starts; None: no more pages


def as_of(history: StatusHistory, moment: float) -> tuple[float, str] | None:
    """The (time, state) a task had at `moment`: its last status change then,
    or None when it did not exist yet."""
    found = None
    for changed, state in history:
        if changed > moment:
            break
        found = (changed, state)
    return found


def stamped_after(status: TaskStatus, moment: float) -> TaskStatus:
    """`status` as a store saves it once a listing reads as of `moment`. A
    status stamped at or before that moment, saved now, had its change
    computed before the listing began and is saved after the listing's first
    page was read without it; with its own stamp the later pages would place
    the task above their cursor and skip it. It is stamped just after the
    moment instead, so the listing places the task where it was then."""
    return stamp_after(status, moment)[0]


def stamp_after(status: TaskStatus, moment: float) -> tuple[TaskStatus, float]:
    """`stamped_after`, and the time of the status it returns in seconds since
    the epoch (0.0 without one): what a store indexes it by, read once."""
    if "timestamp" not in status:
        return status, 0.0
    seconds = epoch(status["timestamp"])
    if seconds <= moment:
        later: TaskStatus = {**status, "timestamp": iso_at(max(time.time(), moment + 2e-6))}
        return later, epoch(later["timestamp"])
    return status, seconds


def restamped(events: Sequence[Event], task: Task, moment: float) -> tuple[list[Event], Task]:
    """A commit's events and the task they fold into, each status update
    stamped as `stamped_after` says (the task's status is its last one's)."""
    saved: list[Event] = []
    last: TaskStatus | None = None
    moved = False
    for event in events:
        if event["kind"] == "status-update":
            status = stamped_after(event["status"], moment)
            if status is not event["status"]:
                event, moved = cast(Event, {**event, "status": status}), True
            last = status
        saved.append(event)
    return saved, ({**task, "status": last} if moved and last is not None else task)


def matches(query: Query, state: str, changed: float) -> bool:
    if query.state is not None and state != query.state:
        return False
    return query.updated_after is None or changed > query.updated_after


def before(position: Position, after: Position | None) -> bool:
    """True when `position` comes after the cursor in newest-first order."""
    return after is None or position < after


def merged_page(
    found: Iterable[Position], changed: Iterable[Position], query: Query
) -> tuple[list[Position], bool]:
    """One page from an index's positions (`found`, already below the cursor)
    and those of the tasks that changed since the listing's moment, placed
    where they were then: newest first, each task once; and whether more follow."""
    shown: dict[str, Position] = {}
    for position in sorted([*found, *(p for p in changed if before(p, query.after))], reverse=True):
        shown.setdefault(position[1], position)
        if len(shown) > query.size:
            break
    page = list(shown.values())
    return page[: query.size], len(page) > query.size


def list_by_scan(
    tasks: Iterable[Task],
    history: Callable[[str], StatusHistory],
    query: Query,
) -> Listing:
    """Answer `query` by reading every task of the store (and, for the few
    that changed since the listing began, their status histories)."""
    placed: list[tuple[Position, Task]] = []
    for task in tasks:
        if task.get("owner", "") != query.owner:
            continue
        if query.context_id is not None and task.get("contextId") != query.context_id:
            continue
        changed = epoch(task["status"].get("timestamp", ""))
        state = state_of(task)
        if changed > query.as_of:
            then = as_of(history(task["id"]), query.as_of)
            if then is None:
                continue  # created after the listing began
            changed, state = then
        if matches(query, state, changed):
            placed.append(((changed, task["id"]), task))
    placed.sort(key=lambda item: item[0], reverse=True)
    remaining = [item for item in placed if before(item[0], query.after)]
    page = remaining[: query.size]
    last = page[-1][0] if len(remaining) > len(page) else None
    return Listing([task for _, task in page], len(placed), last)
