"""Webhook configs, delivery cursors and leases, kept beside their task.

A task's push configs live in the same store as the task (the same Redis
and key prefix, the same directory, the same process's memory), so they
survive what the task survives. For each (task, config) the store keeps:

- the config itself (`PushConfig`, the stored shape below);
- a `Cursor`: the number of the last event the receiver answered 2xx to,
  plus the retry state of the next one (failures so far, since when);
- a lease: which delivery holds the pair, until when (a worker that died
  holding one simply lets it run out; the sweep then hands the pair on).
  The sweep only *books* a free pair for the message it sends (`book`);
  the first delivery to run takes the pair (`lease`) over any booking, its
  own or another's, so a message that waited in the queue longer than a
  booking lasts still delivers (docs/push.md, "Leases and bookings").

`pushing()` lists the tasks that may still have something to deliver: a
task enters with its first config and leaves once it is terminal and every
cursor stands at its last event. What is *due* needs no marker of its own:
a commit's own event number, beyond a cursor, is the due record, written in
the same atomic step as the commit by construction.

Each built-in store makes its own on first use (`Store.push_store`), once
per store; a user's two-method store keeps none (see `shared.stores.adapter`).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, cast

from shared.codec import decode, encode
from shared.errors import ToolnexusError
from shared.store import digest, require_safe_id

if TYPE_CHECKING:
    from collections.abc import Callable

    from shared.store import Store
    from shared.stores.file import FileStore
    from shared.stores.redis.store import RedisStore


class Authentication(TypedDict):
    scheme: str
    credentials: str


class PushConfig(TypedDict, total=False):
    id: str
    taskId: str
    url: str
    token: str
    authentication: Authentication
    version: str  # the dialect that made it: which StreamResponse shape it gets


class TooManyConfigs(ToolnexusError):
    """A task already holds as many push configs as it may."""


@dataclass(frozen=True)
class Cursor:
    delivered: int = 0  # the last event answered with a 2xx
    failures: int = 0  # failed attempts at the next one
    since: float = 0.0  # when its first attempt failed
    given_up: int = 0  # events given up so far


# What a booked lease's holder is stored as, so one lease field says both who
# holds the pair and whether that delivery runs yet (a running one's holder
# is stored as it is: a uuid's hex, never starting so).
BOOKED = "booked:"


def gives_way(current: str, holder: str) -> bool:
    """Whether a lease `current` holds, not run out, gives way to `holder`'s
    running delivery: its own, or a booking of a message not yet run."""
    return current == holder or current.startswith(BOOKED)


class PushStore(Protocol):
    def put(self, config: PushConfig, cap: int) -> None:
        """Save (or replace, by id) a config; TooManyConfigs beyond `cap`."""

    def config(self, task_id: str, config_id: str) -> PushConfig | None: ...

    def configs(self, task_id: str) -> list[PushConfig]:
        """The task's configs, ordered by id."""

    def delete(self, task_id: str, config_id: str) -> bool: ...

    def cursor(self, task_id: str, config_id: str) -> Cursor: ...

    def set_cursor(self, task_id: str, config_id: str, cursor: Cursor) -> None: ...

    def book(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        """Book a free pair (no lease, or one run out) for `holder`, a delivery
        sent but not yet running: True when booked."""

    def lease(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        """Take or renew the pair for `holder`, a running delivery: True unless
        another running delivery holds it (a booking, anyone's, gives way)."""

    def release(self, task_id: str, config_id: str, holder: str) -> None: ...

    def pushing(self) -> list[str]: ...

    def done(self, task_id: str) -> None:
        """The task is finished and delivered: no longer swept."""

    def forget(self, task_id: str) -> None:
        """Everything of the task's push state (the task expired)."""


# --- memory ------------------------------------------------------------------


class MemoryPush:
    def __init__(self, ttl: float | None = None) -> None:
        self._ttl = ttl
        self._finished: dict[str, float] = {}  # task -> when its push state is forgotten
        self._lock = threading.Lock()
        self._configs: dict[str, dict[str, str]] = {}  # task -> id -> JSON
        self._cursors: dict[tuple[str, str], Cursor] = {}
        self._leases: dict[tuple[str, str], tuple[str, float]] = {}
        self._pushing: set[str] = set()

    def put(self, config: PushConfig, cap: int) -> None:
        task_id = config["taskId"]
        with self._lock:
            held = self._configs.setdefault(task_id, {})
            if config["id"] not in held and len(held) >= cap:
                raise TooManyConfigs(f"task {task_id} already has {cap} push configs")
            held[config["id"]] = encode(config)
            self._pushing.add(task_id)
            self._finished.pop(task_id, None)

    def config(self, task_id: str, config_id: str) -> PushConfig | None:
        with self._lock:
            text = self._configs.get(task_id, {}).get(config_id)
        return cast(PushConfig, decode(text)) if text is not None else None

    def configs(self, task_id: str) -> list[PushConfig]:
        with self._lock:
            held = dict(self._configs.get(task_id, {}))
        return [cast(PushConfig, decode(held[key])) for key in sorted(held)]

    def delete(self, task_id: str, config_id: str) -> bool:
        with self._lock:
            self._cursors.pop((task_id, config_id), None)
            return self._configs.get(task_id, {}).pop(config_id, None) is not None

    def cursor(self, task_id: str, config_id: str) -> Cursor:
        with self._lock:
            return self._cursors.get((task_id, config_id), Cursor())

    def set_cursor(self, task_id: str, config_id: str, cursor: Cursor) -> None:
        with self._lock:
            self._cursors[(task_id, config_id)] = cursor

    def book(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        return self._take(task_id, config_id, BOOKED + holder, seconds, lambda _: False)

    def lease(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        return self._take(task_id, config_id, holder, seconds, lambda c: gives_way(c, holder))

    def _take(
        self,
        task_id: str,
        config_id: str,
        stored: str,
        seconds: float,
        yields: Callable[[str], bool],
    ) -> bool:
        now = time.time()
        with self._lock:
            current = self._leases.get((task_id, config_id))
            if current is not None and current[1] > now and not yields(current[0]):
                return False
            self._leases[(task_id, config_id)] = (stored, now + seconds)
            return True

    def release(self, task_id: str, config_id: str, holder: str) -> None:
        with self._lock:
            if self._leases.get((task_id, config_id), ("", 0.0))[0] == holder:
                del self._leases[(task_id, config_id)]

    def pushing(self) -> list[str]:
        now = time.time()
        with self._lock:
            for task_id in [t for t, when in self._finished.items() if when <= now]:
                self._forget(task_id)
            return sorted(self._pushing)

    def done(self, task_id: str) -> None:
        with self._lock:
            self._pushing.discard(task_id)
            if self._ttl:
                self._finished[task_id] = time.time() + self._ttl

    def forget(self, task_id: str) -> None:
        with self._lock:
            self._forget(task_id)

    def _forget(self, task_id: str) -> None:
        self._pushing.discard(task_id)
        self._finished.pop(task_id, None)
        self._configs.pop(task_id, None)
        for key in [key for key in self._cursors if key[0] == task_id]:
            del self._cursors[key]


# --- Redis ---------------------------------------------------------------------

# Adds a config unless the task holds `cap` others already; one atomic step.
_PUT = """
local full = redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3])
if full and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[4])
return 1
"""
# Takes or renews a lease for a running delivery unless another running one
# has it (a booking gives way: see BOOKED).
_LEASE = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] and string.sub(holder, 1, #ARGV[3]) ~= ARGV[3] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""


class RedisPush:
    """Keys: <prefix>push:cfg:<task> (hash id -> config JSON),
    <prefix>push:cur:<task> (hash id -> cursor JSON), <prefix>push:lease:<task>:<hash of id>
    (holder, with a PX expiry) and the set <prefix>push:tasks."""

    def __init__(self, store: RedisStore, ttl: float | None = None) -> None:
        self._ttl = int(ttl) if ttl else 0
        self._client = store.client
        self._prefix = f"{store.prefix}push:"
        self._tasks = f"{self._prefix}tasks"
        self._put = self._client.register_script(_PUT)
        self._lease = self._client.register_script(_LEASE)
        self._release = self._client.register_script(_RELEASE)
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
            self._client.hset(self._key("cur", task_id), config_id, _cursor_text(cursor))

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


# --- files ---------------------------------------------------------------------


class FilePush:
    """`<directory>/.push/<task>.json` holds a task's configs and cursors,
    `.push/<task>.leases.json` its leases; every change is made under one
    flock and lands by rename, so a reader never sees half a file."""

    def __init__(self, store: FileStore, ttl: float | None = None) -> None:
        self._ttl = ttl
        self._root = store.directory / ".push"
        self._root.mkdir(mode=0o700, exist_ok=True)
        self._lock_path = self._root / ".lock"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _path(self, task_id: str, kind: str = "") -> Path:
        return self._root / f"{require_safe_id(task_id)}{kind}.json"

    def _load(self, path: Path) -> dict[str, Any]:
        try:
            return cast(dict[str, Any], json.loads(path.read_bytes()))
        except FileNotFoundError:
            return {}

    def _dump(self, path: Path, value: dict[str, Any]) -> None:
        temp = path.with_suffix(".tmp")
        temp.write_text(json.dumps(value))
        os.replace(temp, path)

    def _state(self, task_id: str) -> dict[str, Any]:
        state = self._load(self._path(task_id))
        state.setdefault("configs", {})
        state.setdefault("cursors", {})
        state.setdefault("pushing", True)
        return state

    def put(self, config: PushConfig, cap: int) -> None:
        task_id = config["taskId"]
        with self._locked():
            state = self._state(task_id)
            if config["id"] not in state["configs"] and len(state["configs"]) >= cap:
                raise TooManyConfigs(f"task {task_id} already has {cap} push configs")
            state["configs"][config["id"]] = dict(config)
            state["pushing"] = True
            state.pop("forget_at", None)
            self._dump(self._path(task_id), state)

    def config(self, task_id: str, config_id: str) -> PushConfig | None:
        found = self._state(task_id)["configs"].get(config_id)
        return cast(PushConfig, found) if found is not None else None

    def configs(self, task_id: str) -> list[PushConfig]:
        held = self._state(task_id)["configs"]
        return [cast(PushConfig, held[key]) for key in sorted(held)]

    def delete(self, task_id: str, config_id: str) -> bool:
        with self._locked():
            state = self._state(task_id)
            removed = state["configs"].pop(config_id, None) is not None
            state["cursors"].pop(config_id, None)
            if removed:
                self._dump(self._path(task_id), state)
        return removed

    def cursor(self, task_id: str, config_id: str) -> Cursor:
        found = self._state(task_id)["cursors"].get(config_id)
        return Cursor(**found) if found else Cursor()

    def set_cursor(self, task_id: str, config_id: str, cursor: Cursor) -> None:
        with self._locked():
            state = self._state(task_id)
            state["cursors"][config_id] = json.loads(_cursor_text(cursor))
            self._dump(self._path(task_id), state)

    def book(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        return self._take(task_id, config_id, BOOKED + holder, seconds, lambda _: False)

    def lease(self, task_id: str, config_id: str, holder: str, seconds: float) -> bool:
        return self._take(task_id, config_id, holder, seconds, lambda c: gives_way(c, holder))

    def _take(
        self,
        task_id: str,
        config_id: str,
        stored: str,
        seconds: float,
        yields: Callable[[str], bool],
    ) -> bool:
        path, now = self._path(task_id, ".leases"), time.time()
        with self._locked():
            leases = self._load(path)
            current = leases.get(config_id)
            if current is not None and current[1] > now and not yields(current[0]):
                return False
            leases[config_id] = [stored, now + seconds]
            self._dump(path, leases)
        return True

    def release(self, task_id: str, config_id: str, holder: str) -> None:
        path = self._path(task_id, ".leases")
        with self._locked():
            leases = self._load(path)
            if leases.get(config_id, [""])[0] == holder:
                del leases[config_id]
                self._dump(path, leases)

    def pushing(self) -> list[str]:
        found, now = [], time.time()
        for path in sorted(self._root.glob("*.json")):
            if path.name.endswith(".leases.json"):
                continue
            state, task_id = self._load(path), path.name.removesuffix(".json")
            if state.get("pushing", True):
                found.append(task_id)
            elif state.get("forget_at", now + 1) <= now:
                self.forget(task_id)
        return found

    def done(self, task_id: str) -> None:
        with self._locked():
            state = self._state(task_id)
            state["pushing"] = False
            if self._ttl:
                state["forget_at"] = time.time() + self._ttl
            self._dump(self._path(task_id), state)

    def forget(self, task_id: str) -> None:
        with self._locked():
            for path in (self._path(task_id), self._path(task_id, ".leases")):
                path.unlink(missing_ok=True)


def _cursor_text(cursor: Cursor) -> str:
    return json.dumps(
        {
            "delivered": cursor.delivered,
            "failures": cursor.failures,
            "since": cursor.since,
            "given_up": cursor.given_up,
        }
    )


class Once:
    """A store's push state, made on first use and then the same object (its
    leases and caches are per process, so there must be one)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._made: PushStore | None = None

    def get(self, make: Callable[[], PushStore]) -> PushStore:
        with self._lock:
            if self._made is None:
                self._made = make()
            return self._made


def push_store(store: Store, ttl: float | None = None) -> PushStore | None:
    """The push state beside `store`'s tasks (`Store.push_store`); None for a
    store that keeps none, which then serves no push notifications. `ttl`
    (the task TTL the store was opened with): how long a finished, delivered
    task's push state is kept, so it goes when the task does."""
    return store.push_store(ttl)
