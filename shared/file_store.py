"""A directory of `<id>.json` files: durable, greppable, shareable.

Layout under the directory:
  <id>.json        the task, pretty-printed JSON, replaced atomically
  .working/<id>    one empty file per task in `working`; its mtime is the
                   last heartbeat, so the reaper's query reads only these
  .locks/<n>       64 lock files striped by id, for compare-and-set across
                   processes (flock), without a lock file per task

Several processes on one host (or one shared volume with working flock)
see each other's tasks and serialise their transitions on the stripe locks.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from shared.store import is_safe_id, require_safe_id, same_status
from shared.task import WORKING, Task, state_of

Clock = Callable[[], float]
_STRIPES = 64


class FileStore:
    def __init__(self, directory: str | os.PathLike[str], clock: Clock = time.time) -> None:
        self.directory = Path(directory)
        self._clock = clock
        self._working = self.directory / ".working"
        self._locks = self.directory / ".locks"
        for folder in (self.directory, self._working, self._locks):
            folder.mkdir(parents=True, exist_ok=True)

    def get(self, task_id: str) -> Task | None:
        if not is_safe_id(task_id):
            return None
        return _read(self.directory / f"{task_id}.json")

    def save(self, task: Task) -> Task:
        task_id = require_safe_id(task.get("id"))
        data = _encode(task)
        with self._locked(task_id):
            self._write(task_id, data, state_of(task))
        return task

    def compare_and_set(self, task: Task, expected_status: Mapping[str, Any]) -> bool:
        task_id = require_safe_id(task.get("id"))
        data = _encode(task)
        with self._locked(task_id):
            if not same_status(self.get(task_id), expected_status):
                return False
            self._write(task_id, data, state_of(task))
            return True

    def all(self) -> dict[str, Task]:
        tasks = {}
        for path in self.directory.glob("*.json"):
            task = _read(path)
            if task is not None and is_safe_id(path.stem):
                tasks[path.stem] = task
        return tasks

    def heartbeat(self, task_id: str) -> None:
        if not is_safe_id(task_id):
            return
        now = self._clock()
        # The task may have left `working`; a heartbeat must not bring it back.
        with suppress(FileNotFoundError):
            os.utime(self._working / task_id, (now, now))

    def stale(self, cutoff: float) -> list[str]:
        with os.scandir(self._working) as entries:
            return [
                entry.name for entry in entries if is_safe_id(entry.name) and _mtime(entry) < cutoff
            ]

    def _write(self, task_id: str, data: bytes, state: str) -> None:
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=f".{task_id}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp, self.directory / f"{task_id}.json")
        except BaseException:
            _unlink(Path(temp))
            raise
        marker = self._working / task_id
        if state == WORKING:
            marker.touch()
            now = self._clock()
            os.utime(marker, (now, now))
        else:
            _unlink(marker)

    @contextmanager
    def _locked(self, task_id: str) -> Iterator[None]:
        stripe = zlib.crc32(task_id.encode()) % _STRIPES
        fd = os.open(self._locks / str(stripe), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock


def _encode(task: Task) -> bytes:
    return json.dumps(task, indent=2, ensure_ascii=False).encode("utf-8") + b"\n"


def _read(path: Path) -> Task | None:
    try:
        task = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None  # unreadable reads as missing: a corrupt file must not take a request down
    return task if isinstance(task, dict) else None


def _mtime(entry: os.DirEntry[str]) -> float:
    try:
        return entry.stat().st_mtime
    except FileNotFoundError:
        return float("inf")  # removed while listing: it left `working`


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


def file_store(directory: str | os.PathLike[str], clock: Clock = time.time) -> FileStore:
    return FileStore(directory, clock)
