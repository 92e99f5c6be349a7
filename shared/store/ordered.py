"""ListTasks at the cost of a page for a store that keeps its tasks in this
process: ordered indexes of task positions, the listing's order.

A task's position is (status time, task id). The index keeps, per owner,
every task's position in one sorted list, and the same per context and per
state, updated under the store's own lock as each change is saved. A page is
then read as `shared.store.listing` defines it (as of the listing's moment,
below the cursor): the entries of the narrowest list at or before that
moment, newest first, until one more than a page, merged with the few
tasks of the scope that changed since the moment, placed where their status
history says they were then. Totals are counted by bisection, except for a
context's tasks in one state, counted by reading the context's list (a
context is small). The index holds positions and ids only; the store reads
the tasks of the page.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable
from dataclasses import dataclass

from shared.store.listing import (
    Listing,
    Position,
    Query,
    StatusHistory,
    as_of,
    before,
    matches,
    merged_page,
)
from shared.task import Task

# Above every safe task id (they are ASCII): (t, _LAST) sorts after every task at time t.
_LAST = "\U0010ffff"

Key = tuple[str, ...]


@dataclass
class _Placed:
    position: Position
    state: str
    keys: tuple[Key, Key, Key]  # the owner's, the context's, the state's list


class OrderedIndex:
    """Not thread-safe: the store calls it under its own lock."""

    def __init__(self) -> None:
        self._lists: dict[Key, list[Position]] = {}
        self._placed: dict[str, _Placed] = {}

    def __len__(self) -> int:
        return len(self._placed)

    def place(
        self, task_id: str, owner: str, context: str | None, state: str, changed: float
    ) -> None:
        """The task's current status (time and state), in every list it belongs to."""
        position = (changed, task_id)
        within: Key = ("context", owner, context) if context is not None else ("no context", owner)
        old = self._placed.get(task_id)
        keys: tuple[Key, Key, Key]
        if old is None:
            keys = (("owner", owner), within, ("state", owner, state))
            self._placed[task_id] = _Placed(position, state, keys)
        else:
            # A task's owner and context stay as they were: its lists are
            # the ones it is in, but for its state's.
            keys = old.keys
            same_scope = keys[0] == ("owner", owner) and keys[1] == within
            if same_scope and old.state == state:
                if old.position == position:
                    return
            else:
                keys = (("owner", owner), within, ("state", owner, state))
            self._unlisted(old)
            old.position, old.state, old.keys = position, state, keys
        for key in keys:
            entries = self._lists.setdefault(key, [])
            # A change is almost always the newest of its list: no search.
            if not entries or entries[-1] < position:
                entries.append(position)
            else:
                insort(entries, position)

    def remove(self, task_id: str) -> None:
        old = self._placed.pop(task_id, None)
        if old is not None:
            self._unlisted(old)

    def _unlisted(self, old: _Placed) -> None:
        """Out of every list it was in."""
        for key in old.keys:
            entries = self._lists[key]
            if entries[-1] == old.position:
                entries.pop()
            else:
                del entries[bisect_left(entries, old.position)]
            if not entries:
                del self._lists[key]

    def answer(
        self,
        query: Query,
        history: Callable[[str], StatusHistory],
        read: Callable[[list[str]], list[Task]],
    ) -> Listing:
        """One page of `query`: `history` gives a task's status changes,
        `read` the tasks of the page (those it no longer finds are left out)."""
        scope: Key = (
            ("context", query.owner, query.context_id)
            if query.context_id is not None
            else ("owner", query.owner)
        )
        by_state = query.state is not None and query.context_id is None
        index: Key = ("state", query.owner, query.state or "") if by_state else scope
        check_state = query.state is not None and not by_state
        entries = self._lists.get(index, [])
        scoped = self._lists.get(scope, [])
        high = query.as_of if query.after is None else min(query.as_of, query.after[0])
        low = query.updated_after
        found: list[Position] = []
        start = bisect_right(entries, (high, _LAST))
        for at in range(start - 1, -1, -1):
            position = entries[at]
            if low is not None and position[0] <= low:
                break
            if not before(position, query.after):
                continue
            if check_state and self._placed[position[1]].state != query.state:
                continue
            found.append(position)
            if len(found) > query.size:
                break
        changed = self._changed(scoped, query, history)
        page, more = merged_page(found, changed, query)
        total = self._count(entries, query, check_state) + len(changed)
        tasks = read([task_id for _, task_id in page])
        return Listing(tasks, total, page[-1] if more and page else None)

    def _changed(
        self, scoped: list[Position], query: Query, history: Callable[[str], StatusHistory]
    ) -> list[Position]:
        """The scope's tasks whose status changed after the listing's moment,
        where they stood then, if they matched (none: created since)."""
        placed = []
        for _, task_id in scoped[bisect_right(scoped, (query.as_of, _LAST)) :]:
            then = as_of(history(task_id), query.as_of)
            if then is not None and matches(query, then[1], then[0]):
                placed.append((then[0], task_id))
        return placed

    def _count(self, entries: list[Position], query: Query, check_state: bool) -> int:
        """The list's tasks at or before the listing's moment (and after
        `updated_after`); in one state only, when the list is a context's."""
        high = bisect_right(entries, (query.as_of, _LAST))
        low = (
            0
            if query.updated_after is None
            else bisect_right(entries, (query.updated_after, _LAST))
        )
        if not check_state:
            return max(0, high - low)
        return sum(
            1 for _, task_id in entries[low:high] if self._placed[task_id].state == query.state
        )
