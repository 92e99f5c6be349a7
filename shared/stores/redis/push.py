"""Push state in Redis, beside the tasks, under the same prefix (see
`shared.push.contract`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, cast

from shared.codec import decode, encode
from shared.push.contract import BOOKED, Cursor, PushConfig, TooManyConfigs, cursor_text
from shared.store.contract import digest, require_safe_id
from shared.stores.redis.scripts import load

if TYPE_CHECKING:
    from shared.stores.redis.store import RedisStore


class RedisPush:
    """Keys: <prefix>push:cfg:<task> (hash id -> config JSON),
    <prefix>push:cur:<task> (hash id -> cursor JSON), <prefix>push:lease:<task>:<hash of id>
    (holder, with a PX expiry) and the set <prefix>push:tasks."""

    def __init__(self, store: RedisStore, ttl: float | None = None) -> None:
        self._ttl = int(ttl) if ttl else 0
        self._client = store.client
        self._prefix = f"{store.prefix}push:"
        self._tasks = f"{self._prefix}tasks"
        self._put = self._client.register_script(load("push_put"))
        self._lease = self._client.register_script(load("push_lease"))
        self._release = self._client.register_script(load("push_release"))
        self._reachable = store.reachable

    def _key(self, kind: str, task_id: str) -> str:
        return f"{self._prefix}{kind}:{require_safe_id(task_id)}"

    def _lease_key(self, task_id: str, config_id: str) -> str:
        return f"{self._key('lease', task_id)}:{digest(config_id)}"

    def put(self, config: PushConfig, cap: int) -> None:
        task_id = config["taskId"]
        keys = [self._key("cfg", task_id), self._tasks]
        with self._reachable():
            added = self._put(keys=keys, args=[config["id"], encode(config), cap, task_id])
        if not added:
            raise TooManyConfigs(f"task {task_id} already has {cap} push configs")

    def config(self, task_id: str, config_id: str) -> PushConfig | None:
        with self._reachable():
            text = self._client.hget(self._key("cfg", task_id), config_id)
        return cast(PushConfig, decode(cast(bytes, text))) if text is not None else None

    def configs(self, task_id: str) -> list[PushConfig]:
        with self._reachable():
            held = cast(dict[bytes, bytes], self._client.hgetall(self._key("cfg", task_id)))
        return [cast(PushConfig, decode(held[key])) for key in sorted(held)]

    def delete(self, task_id: str, config_id: str) -> bool:
        with self._reachable():
            pipe = self._client.pipeline()
            pipe.hdel(self._key("cfg", task_id), config_id)
            pipe.hdel(self._key("cur", task_id), config_id)
            removed, _ = pipe.execute()
        return bool(removed)

    def cursor(self, task_id: str, config_id: str) -> Cursor:
        with self._reachable():
            text = self._client.hget(self._key("cur", task_id), config_id)
        return Cursor(**json.loads(cast(bytes, text))) if text is not None else Cursor()

    def set_cursor(self, task_id: str, config_id: str, cursor: Cursor) -> None:
        with self._reachable():
            self._client.hset(self._key("cur", task_id), config_id, cursor_text(cursor))

    def book(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        key, ms = self._lease_key(task_id, config_id), max(1, int(seconds * 1000))
        with self._reachable():
            return bool(self._client.set(key, BOOKED + holder, nx=True, px=ms))

    def lease(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        args: list[str | int] = [holder, max(1, int(seconds * 1000)), BOOKED]
        with self._reachable():
            return bool(self._lease(keys=[self._lease_key(task_id, config_id)], args=args))

    def release(self, task_id: str, config_id: str, holder: str) -> None:
        with self._reachable():
            self._release(keys=[self._lease_key(task_id, config_id)], args=[holder])

    def pushing(self) -> list[str]:
        with self._reachable():
            members = cast(set[bytes], self._client.smembers(self._tasks))
        return sorted(member.decode() for member in members)

    def done(self, task_id: str) -> None:
        with self._reachable():
            pipe = self._client.pipeline()
            pipe.srem(self._tasks, task_id)
            if self._ttl:  # forgotten when the task is (its TTL runs from when it finished)
                pipe.expire(self._key("cfg", task_id), self._ttl)
                pipe.expire(self._key("cur", task_id), self._ttl)
            pipe.execute()

    def forget(self, task_id: str) -> None:
        with self._reachable():
            pipe = self._client.pipeline()
            pipe.srem(self._tasks, task_id)
            pipe.delete(self._key("cfg", task_id), self._key("cur", task_id))
            pipe.execute()
