"""The send ledger in Redis, beside the tasks, under the same prefix (see
`shared.owners.admission`): one script a step, by the server's clock.

Keys (the owner named by its digest): `<prefix>owner:<digest>:bucket`, a
hash (tokens, at) that expires once the bucket would be full again, and
`<prefix>owner:<digest>:active`, a hash of the owner's reserved task ids
(id -> when reserved). A message key's record is the store's own
`<prefix>msg:<key>`, read as `create.lua` reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import redis

from shared.store.contract import digest, is_safe_id
from shared.stores.redis.faults import reachable
from shared.stores.redis.scripts import load


class RedisLedger:
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        self._take = client.register_script(load("owner_take"))
        self._reserve = client.register_script(load("owner_reserve"))

    def _key(self, owner: str, kind: str) -> str:
        return f"{self._prefix}owner:{digest('owner', owner)}:{kind}"

    def take(self, owner: str, rate: float, size: int) -> float:
        with reachable(self._client):
            wait = self._take(keys=[self._key(owner, "bucket")], args=[repr(rate), size])
        return float(cast(bytes, wait))

    def reserve(self, owner: str, task_id: str, cap: int) -> Mapping[str, float] | None:
        with reachable(self._client):
            found = cast(
                list[bytes], self._reserve(keys=[self._key(owner, "active")], args=[task_id, cap])
            )
        if not found:
            return None
        return {found[i].decode(): float(found[i + 1]) for i in range(0, len(found), 2)}

    def release(self, owner: str, *task_ids: str) -> None:
        if task_ids:
            with reachable(self._client):
                self._client.hdel(self._key(owner, "active"), *task_ids)

    def accepted(self, message_key: str) -> str | None:
        with reachable(self._client):
            found = cast(bytes | None, self._client.get(f"{self._prefix}msg:{message_key}"))
            task_id = found.decode() if found is not None else None
            if task_id is None or not is_safe_id(task_id):
                return None
            kept = self._client.exists(f"{self._prefix}task:{task_id}")
        return task_id if kept else None
