"""Redis: one JSON string per task, plus a sorted set of `working` tasks
scored by last heartbeat, so finding stale tasks is one range query.

Keys (prefix defaults to "toolnexus:"):
  <prefix>task:<id>   the task as JSON; optionally expiring once terminal
  <prefix>working     ZSET id -> heartbeat (seconds since the epoch)

Compare-and-set runs as one Lua script, so the check, the write and the
index update are a single atomic step on the server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from shared.errors import StoreError
from shared.store import is_safe_id, require_safe_id
from shared.task import WORKING, Task, is_terminal, state_of

Clock = Callable[[], float]

# KEYS: task key, working index. ARGV: expected state, expected timestamp,
# new JSON, new state, now, ttl seconds (0 = keep), task id.
_COMPARE_AND_SET = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local ok, task = pcall(cjson.decode, raw)
if not ok or type(task) ~= 'table' or type(task.status) ~= 'table' then return 0 end
if task.status.state ~= ARGV[1] then return 0 end
local stamp = task.status.timestamp
if type(stamp) ~= 'string' then stamp = '' end
if stamp ~= ARGV[2] then return 0 end
if tonumber(ARGV[6]) > 0 then
  redis.call('SET', KEYS[1], ARGV[3], 'EX', ARGV[6])
else
  redis.call('SET', KEYS[1], ARGV[3])
end
if ARGV[4] == 'working' then
  redis.call('ZADD', KEYS[2], ARGV[5], ARGV[7])
else
  redis.call('ZREM', KEYS[2], ARGV[7])
end
return 1
"""


class RedisStore:
    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "toolnexus:",
        terminal_ttl: float | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.client = client
        self._prefix = prefix
        self._index = f"{prefix}working"
        self._ttl = int(terminal_ttl) if terminal_ttl else 0
        self._clock = clock
        self._cas = client.register_script(_COMPARE_AND_SET)

    def get(self, task_id: str) -> Task | None:
        if not is_safe_id(task_id):
            return None
        with self._reachable():
            try:
                raw = self.client.get(self._key(task_id))
            except redis.ResponseError:
                return None  # a key of the wrong type is unreadable data
        return _decode(raw)

    def save(self, task: Task) -> Task:
        task_id = require_safe_id(task.get("id"))
        state = state_of(task)
        with self._reachable():
            pipe = self.client.pipeline(transaction=True)
            pipe.set(self._key(task_id), json.dumps(task), ex=self._ttl_for(state))
            if state == WORKING:
                pipe.zadd(self._index, {task_id: self._clock()})
            else:
                pipe.zrem(self._index, task_id)
            pipe.execute()
        return task

    def compare_and_set(self, task: Task, expected_status: Mapping[str, Any]) -> bool:
        task_id = require_safe_id(task.get("id"))
        state = state_of(task)
        stamp = expected_status.get("timestamp")
        args = [
            expected_status.get("state") or "",
            stamp if isinstance(stamp, str) else "",
            json.dumps(task),
            state,
            repr(self._clock()),
            self._ttl_for(state) or 0,
            task_id,
        ]
        with self._reachable():
            return bool(self._cas(keys=[self._key(task_id), self._index], args=args))

    def all(self) -> dict[str, Task]:
        start = len(self._prefix) + len("task:")
        tasks: dict[str, Task] = {}
        with self._reachable():
            keys = [
                cast(bytes, key) for key in self.client.scan_iter(match=self._key("*"), count=1000)
            ]
            for chunk in range(0, len(keys), 500):
                batch = keys[chunk : chunk + 500]
                for key, raw in zip(batch, self.client.mget(batch), strict=True):
                    task = _decode(raw)
                    if task is not None:
                        tasks[key.decode()[start:]] = task
        return tasks

    def heartbeat(self, task_id: str) -> None:
        with self._reachable():
            # XX: refresh only; a task that left `working` must stay out.
            self.client.zadd(self._index, {task_id: self._clock()}, xx=True)

    def stale(self, cutoff: float) -> list[str]:
        with self._reachable():
            ids = self.client.zrangebyscore(self._index, "-inf", f"({cutoff!r}")
        return [i.decode() for i in cast(list[bytes], ids)]

    def ping(self) -> None:
        with self._reachable():
            self.client.ping()

    def _key(self, task_id: str) -> str:
        return f"{self._prefix}task:{task_id}"

    def _ttl_for(self, state: str) -> int | None:
        return self._ttl if self._ttl and is_terminal(state) else None

    @contextmanager
    def _reachable(self) -> Iterator[None]:
        try:
            yield
        except (redis.ConnectionError, redis.TimeoutError) as error:
            where = self.client.connection_pool.connection_kwargs
            host = where.get("path") or f"{where.get('host')}:{where.get('port')}"
            raise StoreError(f"task store unavailable: Redis at {host}: {error}") from error


def _decode(raw: object) -> Task | None:
    if not isinstance(raw, bytes | str):
        return None
    try:
        task = json.loads(raw)
    except ValueError:
        return None
    return task if isinstance(task, dict) else None


def redis_store(
    url: str,
    *,
    prefix: str = "toolnexus:",
    terminal_ttl: float | None = None,
    timeout: float = 2.0,
    clock: Clock = time.time,
) -> RedisStore:
    """A store on the Redis at `url`; nothing is sent until first use.

    `timeout` bounds every call, so a peer hears "store unavailable" within
    seconds when Redis is down, instead of a request hanging.
    """
    client = redis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        health_check_interval=15,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
    return RedisStore(client, prefix=prefix, terminal_ttl=terminal_ttl, clock=clock)
