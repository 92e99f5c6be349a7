"""Push state in files, beside the file store's tasks (see `shared.push.contract`):
made by the store from its directory."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from shared.push.contract import (
    Cursor,
    PushConfig,
    TakenInProcess,
    TooManyConfigs,
    cursor_text,
)
from shared.store.contract import require_safe_id
from shared.stores.file.locking import flock_within, unlock


class FilePush(TakenInProcess):
    """`<directory>/.push/<task>.json` holds a task's configs and cursors,
    `.push/<task>.leases.json` its leases; every change is made under one
    flock and lands by rename, so a reader never sees half a file."""

    def __init__(self, directory: Path, ttl: float | None = None) -> None:
        self._ttl = ttl
        self._root = directory / ".push"
        self._root.mkdir(mode=0o700, exist_ok=True)
        self._lock_path = self._root / ".lock"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            flock_within(fd, self._lock_path)
            yield
        finally:
            unlock(fd)

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
            state["cursors"][config_id] = json.loads(cursor_text(cursor))
            self._dump(self._path(task_id), state)

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
