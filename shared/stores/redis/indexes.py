"""Scored indexes (`shared.indexes`) in Redis, beside the tasks under the
same prefix: `<prefix>idx:<name>`, a sorted set (which orders members of
one score by their text, as the contract asks); the time indexes keep the
keys `<prefix><name>` they had before they were scored indexes, so a store
written earlier reads the same. A write goes through the
store's `Replicas`, so with TOOLNEXUS_REDIS_MIN_REPLICAS it is confirmed
as every other write the service relies on."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import cast

import redis

from shared.store.time_indexes import STATES as TIME_INDEXES
from shared.stores.redis.faults import reachable
from shared.stores.redis.replicas import Replicas
from shared.stores.redis.scripts import load


class RedisIndexes:
    def __init__(self, client: redis.Redis, prefix: str, replicas: Replicas) -> None:
        self._client = client
        self._prefix = prefix
        self._replicas = replicas
        self._place = client.register_script(load("index_place"))

    def add(self, name: str, member: str, score: float) -> None:
        with reachable(self._client):
            self._replicas.command("ZADD", self.key(name), repr(float(score)), member)

    def remove(self, name: str, *members: str) -> None:
        if members:
            with reachable(self._client):
                self._replicas.command("ZREM", self.key(name), *members)

    def place(self, member: str, scores: Mapping[str, float | None]) -> None:
        if scores:
            keys = [self.key(name) for name in scores]
            args = [member, *("" if s is None else repr(float(s)) for s in scores.values())]
            with reachable(self._client):
                self._replicas.script(self._place, keys, args)

    def rescore(self, name: str, members: Sequence[str], score: float) -> None:
        if members:
            with reachable(self._client):
                self._replicas.command(
                    "ZADD", self.key(name), "XX", *[v for m in members for v in (score, m)]
                )

    def score(self, name: str, member: str) -> float | None:
        with reachable(self._client):
            found = self._client.zscore(self.key(name), member)
        return None if found is None else float(found)

    def range(
        self, name: str, upto: float = math.inf, limit: int | None = None
    ) -> list[tuple[str, float]]:
        high = "+inf" if upto == math.inf else repr(float(upto))
        with reachable(self._client):
            found = cast(
                list[tuple[bytes, float]],
                self._client.zrangebyscore(
                    self.key(name),
                    "-inf",
                    high,
                    start=None if limit is None else 0,
                    num=limit,
                    withscores=True,
                ),
            )
        return [(member.decode(), float(score)) for member, score in found]

    def key(self, name: str) -> str:
        """The sorted set of index `name`."""
        if name in TIME_INDEXES:
            return f"{self._prefix}{name}"
        return f"{self._prefix}idx:{name}"
