"""The turn book in Redis, under the store's prefix (`shared.owners.turns`).

Keys under `<prefix>turns:`: `where` (held task -> owner), `held:<owner>`
(a sorted set per owner: priority, then arrival), `held_at` (held task ->
when), `owners` (an entry per owner with held tasks -> its pass; the entry
is the arrival number of the owner's next task, then the owner), `entry`
(owner -> that entry), `terms` (owner -> "weight cap"), `flight` (task in
flight -> owner), `flight_at`, `running` (owner -> tasks in flight),
`workers` (worker -> expiry), `slots`, `vtime`, `seq`, and `msg:<task>` (a
held task's message, kept where the broker shares the store's server,
`shared.broker.outbox`: the step that takes the task queues it). Each step is one
script (`lua/turns.lua`), on the server's clock, so front ends and workers
with skewed clocks agree.
"""

from __future__ import annotations

import time
from typing import Any, cast

import redis

from shared.owners.book import (
    FLOOR,
    MOST_KEPT,
    BookView,
    Entry,
    OwnerCount,
    Publish,
    TakenByCreates,
)
from shared.stores.redis.faults import reachable
from shared.stores.redis.scripts import load

# What a write that released a task does with the ids its step took.


def taken_ids(taken: list[Any]) -> list[str]:
    return [item.decode() if isinstance(item, bytes) else str(item) for item in taken]


class RedisTurnBook:
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self._client = client
        self._prefix = f"{prefix}turns:"
        self._step = client.register_script(load("turns"))
        self._register = client.register_script(load("turns_register"))
        self._lapsed = client.register_script(load("turns_lapsed"))
        self.creates = TakenByCreates()
        # Set by `release_on_commit`: whether turns are fair, and where the
        # ids a releasing write took go; the tasks such writes released,
        # until the `release_and_take` of each, which follows at once.
        self._on_commit: tuple[bool, Publish] | None = None
        self._released: set[str] = set()

    def step_args(
        self, entries: list[Entry], released: list[str], fair: bool
    ) -> list[str | int | float]:
        """The arguments of one step (`lua/turns.lua`)."""
        args: list[str | int | float] = [self._prefix, 1 if fair else 0, FLOOR, len(entries)]
        for entry in entries:
            cap = "" if entry.max_running is None else entry.max_running
            args += [entry.task_id, entry.owner, entry.priority, repr(entry.weight), cap]
        args += [len(released), *released]
        return args

    def _run(self, entries: list[Entry], released: list[str], fair: bool) -> list[str]:
        args = self.step_args(entries, released, fair)
        with reachable(self._client):
            taken = self._step(keys=[], args=args)
        return taken_ids(taken)

    def release_on_commit(self, fair: bool, publish: Publish) -> None:
        """From now on a write of this store that takes a task out of flight
        (`lua/commit_released.lua`) also releases it from the book, in the
        same script, and hands what that step took (and did not queue itself,
        a kept message) to `publish`; the task's
        `release_and_take`, which follows, then asks nothing more. Should it
        never come (the write was the reaper's, say), nothing is missed: the
        task was released and what the step took was published; a later
        release of that task alone skips a step that would release nothing,
        and what has room then is taken by the next step of any process."""
        self._on_commit = (fair, publish)

    def release_args(self, task_id: str) -> list[str | int | float] | None:
        """The step's arguments for a write that takes `task_id` out of
        flight; None when writes do not release (`release_on_commit`)."""
        if self._on_commit is None:
            return None
        return self.step_args([], [task_id], self._on_commit[0])

    def released(self, task_id: str, taken: list[Any]) -> None:
        """A write released `task_id` in a step that took `taken`."""
        if self._on_commit is None:
            return
        if len(self._released) >= MOST_KEPT:
            self._released.clear()  # never asked for: the step then runs, releasing nothing
        self._released.add(task_id)
        self._on_commit[1](taken_ids(taken))

    def hold_and_take(self, entries: list[Entry], fair: bool) -> list[str]:
        taken = self.creates.claim(entries)
        return self._run(entries, [], fair) if taken is None else taken

    def release_and_take(self, task_ids: list[str], fair: bool) -> list[str]:
        if len(task_ids) == 1 and task_ids[0] in self._released:
            self._released.discard(task_ids[0])
            return []  # released by its write, whose step published what it took
        return self._run([], task_ids, fair)

    def held_among(self, task_ids: list[str]) -> tuple[set[str], set[str]]:
        if not task_ids:
            return set(), set()
        with reachable(self._client):
            pipe = self._client.pipeline(transaction=False)
            pipe.hmget(f"{self._prefix}where", task_ids)
            pipe.hmget(f"{self._prefix}flight", task_ids)
            held, flying = pipe.execute()
        return (
            {task for task, owner in zip(task_ids, held, strict=True) if owner is not None},
            {task for task, owner in zip(task_ids, flying, strict=True) if owner is not None},
        )

    def in_flight(self) -> list[str]:
        with reachable(self._client):
            ids = cast(list[bytes], self._client.hkeys(f"{self._prefix}flight"))
        return [item.decode() for item in ids]

    def register(self, worker: str, slots: int, ttl: float) -> None:
        with reachable(self._client):
            self._register(keys=[], args=[self._prefix, worker, slots, ttl])

    def unregister(self, worker: str) -> None:
        with reachable(self._client):
            pipe = self._client.pipeline(transaction=False)
            pipe.zrem(f"{self._prefix}workers", worker)
            pipe.hdel(f"{self._prefix}slots", worker)
            pipe.execute()

    def lapsed(self) -> list[str]:
        with reachable(self._client):
            return taken_ids(self._lapsed(keys=[], args=[self._prefix]))

    def view(self) -> BookView:
        p = self._prefix
        with reachable(self._client):
            pipe = self._client.pipeline(transaction=False)
            pipe.hkeys(f"{p}entry")
            pipe.hgetall(f"{p}running")
            pipe.zrange(f"{p}held_at", 0, 0, withscores=True)
            pipe.zrangebyscore(f"{p}workers", time.time(), "+inf")
            owners, running, oldest, live = pipe.execute()
            pipe = self._client.pipeline(transaction=False)
            for owner in owners:
                pipe.zcard(f"{p}held:{owner.decode()}")
            if live:
                pipe.hmget(f"{p}slots", live)
            counted = pipe.execute()
        held = dict(zip((o.decode() for o in owners), counted[: len(owners)], strict=True))
        slots = sum(int(n) for n in counted[len(owners)] if n) if live else 0
        flying = {o.decode(): int(n) for o, n in running.items()}
        view = {
            owner: OwnerCount(held.get(owner, 0), flying.get(owner, 0))
            for owner in {*held, *flying}
        }
        return BookView(view, oldest[0][1] if oldest else None, slots)
