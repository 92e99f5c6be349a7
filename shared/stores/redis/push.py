"""Push state in Redis, beside the tasks, under the same prefix (see
`shared.push.contract`): made by the store from its client and key prefix."""

from __future__ import annotations

import json
from typing import cast

import redis

from shared.codec import decode, encode
from shared.keys import digest
from shared.push.contract import BOOKED, Cursor, PushConfig, TooManyConfigs, cursor_text
from shared.store.contract import require_safe_id
from shared.stores.redis.faults import reachable
from shared.stores.redis.replicas import Replicas
from shared.stores.redis.scripts import load


class RedisPush:
    """Keys: <prefix>push:cfg:<task> (hash id -> config JSON),
    <prefix>push:cur:<task> (hash id -> cursor JSON), <prefix>push:lease:<task>:<hash of id>
    (holder, with a PX expiry) and the set <prefix>push:tasks."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        ttl: float | None = None,
        replicas: Replicas | None = None,
    ) -> None:
        self._ttl = int(ttl) if ttl else 0
        self._replicas = replicas or Replicas(client)
        self._client = client
        self._prefix = f"{prefix}push:"
        self._tasks = f"{self._prefix}tasks"
        self._put = self._client.register_script(load("push_put"))
        self._lease = self._client.register_script(load("push_lease"))
        self._release = self._client.register_script(load("push_release"))

    def _key(self, kind: str, task_id: str) -> str:
        return f"{self._prefix}{kind}:{require_safe_id(task_id)}"

    def _lease_key(self, task_id: str, config_id: str) -> str:
        return f"{self._key('lease', task_id)}:{digest(config_id)}"

    def put(self, config: PushConfig, cap: int) -> None:
        task_id = config["taskId"]
        keys = [self._key("cfg", task_id), self._tasks]
        with reachable(self._client):
            args = [config["id"], encode(config), cap, task_id]
            added = self._replicas.script(self._put, keys, args)
        if not added:
            raise TooManyConfigs(f"task {task_id} already has {cap} push configs")

    def config(self, task_id: str, config_id: str) -> PushConfig | None:
        with reachable(self._client):
            text = self._client.hget(self._key("cfg", task_id), config_id)
        return cast(PushConfig, decode(cast(bytes, text))) if text is not None else None

    def configs(self, task_id: str) -> list[PushConfig]:
        with reachable(self._client):
            held = cast(dict[bytes, bytes], self._client.hgetall(self._key("cfg", task_id)))
        return [cast(PushConfig, decode(held[key])) for key in sorted(held)]

    def delete(self, task_id: str, config_id: str) -> bool:
        configs, cursors = self._key("cfg", task_id), self._key("cur", task_id)
        with reachable(self._client):
            removed, _ = self._replicas.pipeline(
                lambda pipe: pipe.hdel(configs, config_id).hdel(cursors, config_id)
            )
        return bool(removed)

    def cursor(self, task_id: str, config_id: str) -> Cursor:
        with reachable(self._client):
            text = self._client.hget(self._key("cur", task_id), config_id)
        return Cursor(**json.loads(cast(bytes, text))) if text is not None else Cursor()

    def set_cursor(self, task_id: str, config_id: str, cursor: Cursor) -> None:
        key = self._key("cur", task_id)
        with reachable(self._client):
            self._replicas.command("HSET", key, config_id, cursor_text(cursor))

    def book(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        key, ms = self._lease_key(task_id, config_id), max(1, int(seconds * 1000))
        with reachable(self._client):
            return bool(self._client.set(key, BOOKED + holder, nx=True, px=ms))

    def lease(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        args: list[str | int] = [holder, max(1, int(seconds * 1000)), BOOKED]
        with reachable(self._client):
            return bool(self._lease(keys=[self._lease_key(task_id, config_id)], args=args))

    def release(self, task_id: str, config_id: str, holder: str) -> None:
        with reachable(self._client):
            self._release(keys=[self._lease_key(task_id, config_id)], args=[holder])

    def pushing(self) -> list[str]:
        with reachable(self._client):
            members = cast(set[bytes], self._client.smembers(self._tasks))
        return sorted(member.decode() for member in members)

    def done(self, task_id: str) -> None:
        with reachable(self._client):
            pipe = self._client.pipeline()
            pipe.srem(self._tasks, task_id)
            if self._ttl:  # forgotten when the task is (its TTL runs from when it finished)
                pipe.expire(self._key("cfg", task_id), self._ttl)
                pipe.expire(self._key("cur", task_id), self._ttl)
            pipe.execute()

    def forget(self, task_id: str) -> None:
        with reachable(self._client):
            pipe = self._client.pipeline()
            pipe.srem(self._tasks, task_id)
            pipe.delete(self._key("cfg", task_id), self._key("cur", task_id))
            pipe.execute()
