"""Small documents (`shared.documents`) in Redis, beside the tasks
under the same prefix: `<prefix>doc:<name>`, a hash of its version (`v`)
and its JSON (`body`) that Redis expires by itself. A read and a swap are
one script each, the read by the server's clock (`TIME`); a swap goes
through the store's `Replicas`, so with TOOLNEXUS_REDIS_MIN_REPLICAS it is
confirmed as every other write the service relies on."""

from __future__ import annotations

import math
from typing import Any, cast

import redis

from shared.codec import decode, encode
from shared.documents import ABSENT, Document, new_version
from shared.stores.redis.faults import reachable
from shared.stores.redis.replicas import Replicas
from shared.stores.redis.scripts import load


class RedisDocuments:
    def __init__(self, client: redis.Redis, prefix: str, replicas: Replicas) -> None:
        self._client = client
        self._replicas = replicas
        self._prefix = prefix
        self._read = client.register_script(load("document_read"))
        self._swap = client.register_script(load("document_swap"))

    def document(self, name: str) -> Document:
        with reachable(self._client):
            found = cast(list[Any], self._read(keys=[self._key(name)]))
        seconds, micros, version, body = found
        now = int(seconds) + int(micros) / 1_000_000
        if not version:
            return Document(ABSENT, None, now)
        return Document(_text(version), decode(body), now)

    def swap(self, name: str, version: str, value: Any, ttl: float | None = None) -> bool:
        body = "" if value is None else encode(value)
        lives = "" if ttl is None else str(max(1, math.ceil(ttl * 1000)))
        with reachable(self._client):
            args = [version, new_version(), body, lives]
            written = self._replicas.script(self._swap, [self._key(name)], args)
        return bool(written)

    def _key(self, name: str) -> str:
        return f"{self._prefix}doc:{name}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
