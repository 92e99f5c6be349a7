"""ListTasks on Redis at the cost of one page.

The store keeps, per owner, sorted sets of task ids scored by status time:
all of them, per context and per state (`shared.stores.redis.scripts` updates them
in the same step as each change). A page is a range read from the narrowest
of them, below the cursor and at or before the listing's moment (see
`shared.store.listing`), merged with the few tasks that changed since that
moment, placed where their status history says they were then. Totals are
range counts. The tasks of the page are read in one round trip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import redis

from shared.keys import digest
from shared.store.contract import Record
from shared.store.listing import Listing, Position, Query, as_of, before, matches, merged_page
from shared.task import Task

_CHUNK = 100
# A task's record from its snapshot, event number, tail and generation, as
# GetTask reads it (the store's `_record`).
RecordOf = Callable[[Any, Any, Any, Any], Record | None]


class RedisListing:
    def __init__(self, client: redis.Redis, prefix: str, record: RecordOf) -> None:
        self._client = client
        self._prefix = prefix
        self._record = record

    def answer(self, query: Query) -> Listing:
        listed = f"{self._prefix}lidx:{digest(query.owner)}"
        scope = f"{listed}:ctx:{digest(query.context_id)}" if query.context_id else listed
        by_state = query.state is not None and query.context_id is None
        index = f"{listed}:state:{query.state}" if by_state else scope
        check_state = query.state is not None and not by_state
        low = f"({query.updated_after!r}" if query.updated_after is not None else "-inf"
        high = query.as_of if query.after is None else min(query.as_of, query.after[0])
        chunk = max(_CHUNK, query.size + 1)

        # One atomic step: the listing's moment made known to the writes (a
        # status stamped at or before it and saved after this step is filed
        # just after it: see lua/listed.lua), and a read of the first chunk,
        # of the tasks that changed since the listing began, and of the
        # total: a task moving meanwhile is in exactly one of them.
        pipe = self._client.pipeline(transaction=True)
        pipe.zadd(f"{self._prefix}listed", {"as_of": query.as_of}, gt=True)
        pipe.zrevrangebyscore(index, repr(high), low, start=0, num=chunk, withscores=True)
        pipe.zrangebyscore(scope, f"({query.as_of!r}", "+inf")
        pipe.zcount(index, low, repr(query.as_of))
        _, first, changed_ids, counted = pipe.execute()
        main, more_read = self._main(index, query, high, low, first, chunk, check_state)
        if more_read:
            # Tasks that moved while later chunks were read are found here.
            changed_ids = {
                *changed_ids,
                *self._client.zrangebyscore(scope, f"({query.as_of!r}", "+inf"),
            }
        changed = self._placed([i.decode() for i in changed_ids], query)
        page, more = merged_page(main, changed, query)
        if check_state:
            counted = self._count_in_state(index, query, low)
        tasks = self._tasks([task_id for _, task_id in page])
        return Listing(tasks, int(counted) + len(changed), page[-1] if more and page else None)

    def _main(
        self,
        index: str,
        query: Query,
        high: float,
        low: str,
        first: list[tuple[bytes, float]],
        chunk: int,
        check_state: bool,
    ) -> tuple[list[Position], bool]:
        """The index's entries below the cursor and at or before the listing's
        moment, newest first, until one more than a page; and whether more
        than the first chunk had to be read."""
        found: list[Position] = []
        entries, offset, more_read = first, 0, False
        while True:
            offset += len(entries)
            positions = [(score, member.decode()) for member, score in entries]
            positions = [p for p in positions if before(p, query.after)]
            if check_state:
                positions = self._in_state(positions, query.state or "")
            found += positions
            if len(found) > query.size or len(entries) < chunk:
                return found, more_read
            more_read = True
            entries = cast(
                list[tuple[bytes, float]],
                self._client.zrevrangebyscore(
                    index, repr(high), low, start=offset, num=chunk, withscores=True
                ),
            )

    def _placed(self, ids: list[str], query: Query) -> list[Position]:
        """Tasks whose status time is later than the listing's moment, placed
        where their history says they were then (none: created since)."""
        if not ids:
            return []
        pipe = self._client.pipeline(transaction=False)
        for task_id in ids:
            pipe.lrange(f"{self._prefix}hist:{task_id}", 0, -1)
        placed = []
        for task_id, raw in zip(ids, pipe.execute(), strict=True):
            history = [_change(entry) for entry in cast(list[bytes], raw)]
            then = as_of(history, query.as_of)
            if then is not None and matches(query, then[1], then[0]):
                placed.append((then[0], task_id))
        return placed

    def _in_state(self, positions: list[Position], state: str) -> list[Position]:
        pipe = self._client.pipeline(transaction=False)
        for _, task_id in positions:
            pipe.hget(f"{self._prefix}task:{task_id}", "state")
        states = pipe.execute()
        return [p for p, s in zip(positions, states, strict=True) if s == state.encode()]

    def _count_in_state(self, index: str, query: Query, low: str) -> int:
        """A context's tasks in one state, counted by reading the context's
        index whole (contexts are small; the state of each is a field)."""
        total, offset = 0, 0
        while entries := cast(
            list[tuple[bytes, float]],
            self._client.zrevrangebyscore(
                index, repr(query.as_of), low, start=offset, num=_CHUNK, withscores=True
            ),
        ):
            offset += len(entries)
            positions = [(score, member.decode()) for member, score in entries]
            total += len(self._in_state(positions, query.state or ""))
        return total

    def _tasks(self, ids: list[str]) -> list[Task]:
        """The tasks of a page, read together in one atomic round trip, each
        as GetTask reads it (one expired since it was listed, or unreadable,
        left out)."""
        if not ids:
            return []
        pipe = self._client.pipeline(transaction=True)
        for task_id in ids:
            pipe.hmget(f"{self._prefix}task:{task_id}", "doc", "seq", "g")
            pipe.get(f"{self._prefix}tail:{task_id}")
        replies: list[Any] = pipe.execute()
        records = (
            self._record(doc, seq, tail, kept)
            for (doc, seq, kept), tail in zip(replies[::2], replies[1::2], strict=True)
        )
        return [record.task for record in records if record is not None]


def _change(entry: bytes) -> tuple[float, str]:
    moment, _, state = entry.decode().partition("|")
    return float(moment), state
