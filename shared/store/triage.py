"""Failed tasks grouped by why they failed (`shared.failures`), over the
newest failures only, so that a look costs the same however many tasks the
store holds.

A caller's look reads its own newest failed tasks through the store's
listing (an index per owner on every shipped store: one page). An
administrator's look counts every owner's newest failures by group from the
store's index of failures alone (one range read), then reads the few tasks
it shows (at most READS); a store that keeps no such index
(a user's two-method store) gives the administrator its own tasks only,
and says so (`everyone` is False). Each group has its count within that
window, and its newest tasks first.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from shared.failures import Entry, Failure, failure_of, forget, newest
from shared.indexes import Indexes
from shared.store.contract import Store
from shared.store.listing import Query
from shared.task import FAILED, Task

# How many of the newest failed tasks a look groups: enough to see what is
# going wrong now, few enough that a look reads a bounded number of tasks.
WINDOW: Final = 200
# How many of each group's newest tasks a look shows.
SHOWN: Final = 5
# How many tasks an administrator's look reads at most, to show them (it
# counts the groups from the index alone).
READS: Final = 40


@dataclass
class Group:
    failure: Failure
    count: int = 0
    tasks: list[Task] = field(default_factory=list)  # newest first, SHOWN at most
    ids: list[str] = field(default_factory=list)  # every one in the window, newest first


@dataclass(frozen=True)
class Look:
    """`groups`, largest first; `window`, how many failed tasks were read
    (at most WINDOW); `total`, how many failed tasks the caller has (None
    where it is not known: an administrator's look); `everyone`, whether
    the look covers every owner."""

    groups: list[Group]
    window: int
    total: int | None
    everyone: bool


def look(store: Store, owner: str, indexes: Indexes | None, window: int = WINDOW) -> Look:
    """The newest failed tasks grouped: every owner's from the store's index
    of failures `indexes` (`shared.store.wiring.Abilities`: an
    administrator's look), else `owner`'s own."""
    if indexes is None:
        query = Query(owner, None, FAILED, None, window, time.time(), None)
        listing = store.listing(query)
        return Look(grouped(listing.tasks), len(listing.tasks), listing.total, everyone=False)
    groups: dict[str, Group] = {}
    entries = newest(indexes, window)
    for entry in entries:
        group = groups.setdefault(entry.group, Group(Failure.named(entry.group)))
        group.count += 1
        group.ids.append(entry.task_id)
    ordered = _largest_first(groups.values())
    reads, gone = READS, []
    for group in ordered:
        for task_id in group.ids[:SHOWN]:
            if reads == 0:
                break
            reads -= 1
            task = store.get(task_id)
            if task is None:  # expired or purged since: it leaves the index
                gone.append(Entry(task_id, group.failure.group))
                group.ids.remove(task_id)
                group.count -= 1
            else:
                group.tasks.append(task)
    forget(indexes, gone)
    kept = [group for group in ordered if group.count]
    return Look(kept, len(entries) - len(gone), None, everyone=True)


def grouped(tasks: Sequence[Task]) -> list[Group]:
    """`tasks` (newest first) by failure, the largest group first (ties:
    the one with the newest task first)."""
    groups: dict[Failure, Group] = {}
    for task in tasks:
        failure = failure_of(task)
        group = groups.setdefault(failure, Group(failure))
        group.count += 1
        group.ids.append(task["id"])
        if len(group.tasks) < SHOWN:
            group.tasks.append(task)
    return _largest_first(groups.values())


def _largest_first(groups: Iterable[Group]) -> list[Group]:
    return sorted(groups, key=lambda group: -group.count)
