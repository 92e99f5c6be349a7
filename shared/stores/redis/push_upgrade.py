"""Push state an earlier version kept in Redis keys of its own, taken over
once by the push state written over documents (`shared.push.documents`).

The earlier keys: `<prefix>push:cfg:<task>` (hash: config id -> config
JSON), `<prefix>push:cur:<task>` (hash: config id -> cursor JSON), the set
`<prefix>push:tasks` (the tasks still swept) and per-pair leases (short-
lived: not carried over). A finished task's hashes expired by themselves;
what is left of that time is kept. Once every such task is taken over, the
key `<prefix>push:upgraded` says so, and later starts look no further.
"""

from __future__ import annotations

import json
from typing import cast

import redis

from shared.push.documents import DocumentPush
from shared.store.contract import is_safe_id
from shared.stores.redis.faults import reachable


def take_over(client: redis.Redis, prefix: str, push: DocumentPush) -> int:
    """Take over what an earlier version kept; the number of tasks taken."""
    done_key = f"{prefix}push:upgraded"
    taken = 0
    with reachable(client):
        if client.exists(done_key):
            return 0
        swept = {m.decode() for m in cast(set[bytes], client.smembers(f"{prefix}push:tasks"))}
        for key in client.scan_iter(match=f"{_escaped(prefix)}push:cfg:*", count=1000):
            task_id = cast(bytes, key).decode()[len(f"{prefix}push:cfg:") :]
            if not is_safe_id(task_id):
                continue
            configs = _json_values(client.hgetall(key))
            cursors = _json_values(client.hgetall(f"{prefix}push:cur:{task_id}"))
            left = int(client.pttl(key))
            forget_in = left / 1000 if left > 0 else None
            push.take_over(task_id, configs, cursors, pushing=task_id in swept, forget_in=forget_in)
            client.delete(key, f"{prefix}push:cur:{task_id}")
            taken += 1
        client.delete(f"{prefix}push:tasks")
        client.set(done_key, "1")
    return taken


def _json_values(found: object) -> dict[str, object]:
    values = cast(dict[bytes, bytes], found)
    return {key.decode(): json.loads(value) for key, value in values.items()}


def _escaped(prefix: str) -> str:
    """The prefix as a SCAN pattern matches it literally."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in prefix)
