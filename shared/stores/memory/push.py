"""Push state in this process's memory, beside the memory store's tasks
(see `shared.push.contract`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import cast

from shared.codec import decode, encode
from shared.push.contract import Cursor, PushConfig, TakenInProcess, TooManyConfigs


class MemoryPush(TakenInProcess):
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
