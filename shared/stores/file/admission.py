"""The send ledger in files, beside the tasks (see `shared.owners.admission`),
shared by every process on the directory.

Each owner has `.owners/<digest>.lock`, held with `flock` for each step,
and `.owners/<digest>.json`, its state ({"tokens", "at", "active": {task id:
reserved at}}), written whole to a temporary file renamed over it. A state
that cannot be read (a crash before the rename reached the disk) is an
owner with a full bucket and nothing active, which only errs towards
letting a send through. The clock is the wall's (the store's): one machine's,
or machines that share the volume and keep their clocks in step.
"""

from __future__ import annotations

import errno
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from shared.errors import StoreError
from shared.store.contract import Record, digest
from shared.stores.file.locking import flock_within, unlock
from shared.stores.file.log import open_no_link

# A bucket holding this much less than a whole token holds one (float error).
EPSILON: Final = 1e-9
_NOFOLLOW: Final = os.O_NOFOLLOW | os.O_CLOEXEC

State = dict[str, Any]


class FileLedger:
    def __init__(
        self,
        directory: Path,
        read: Callable[[str], Record | None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`directory`: the store's; `read`: the store's read, to tell
        whether the task a message record names is still kept."""
        self._messages = directory / ".messages"
        self._folder = directory / ".owners"
        self._read = read
        self._clock = clock
        self._folder.mkdir(mode=0o700, exist_ok=True)
        if self._folder.is_symlink():
            raise StoreError(f"task store: {self._folder} is a symbolic link; refusing to use it")

    def take(self, owner: str, rate: float, size: int) -> float:
        with self._owner(owner) as (state, save):
            now = self._clock()
            then = float(state.get("at", now))
            tokens = float(state.get("tokens", size)) + max(0.0, now - then) * rate
            tokens = min(float(size), tokens)
            if tokens < 1 - EPSILON:
                return (1 - tokens) / rate
            state["tokens"], state["at"] = max(0.0, tokens - 1), max(then, now)
            save(state)
            return 0.0

    def reserve(self, owner: str, task_id: str, cap: int) -> Mapping[str, float] | None:
        with self._owner(owner) as (state, save):
            now = self._clock()
            held: dict[str, float] = state.setdefault("active", {})
            if task_id in held:
                return None
            if len(held) < cap:
                held[task_id] = now
                save(state)
                return None
            return {held_id: now - float(since) for held_id, since in held.items()}

    def release(self, owner: str, *task_ids: str) -> None:
        with self._owner(owner) as (state, save):
            held: dict[str, float] = state.get("active", {})
            if any(task_id in held for task_id in task_ids):
                for task_id in task_ids:
                    held.pop(task_id, None)
                save(state)

    def accepted(self, message_key: str) -> str | None:
        task_id = _read_text(self._messages / message_key)
        return task_id if task_id and self._read(task_id) is not None else None

    @contextmanager
    def _owner(self, owner: str) -> Iterator[tuple[State, Callable[[State], None]]]:
        """The owner's state, with its lock held until the block ends, and
        the function that saves it."""
        name = digest("owner", owner)
        path = self._folder / f"{name}.json"
        try:
            fd = open_no_link(self._folder / f"{name}.lock", os.O_RDWR | os.O_CREAT)
        except OSError as error:
            raise _failed(error) from error
        try:
            flock_within(fd, self._folder / f"{name}.lock")
            yield _loaded(path), lambda state: _saved(path, state)
        finally:
            unlock(fd)


def _loaded(path: Path) -> State:
    text = _read_text(path)
    try:
        state = json.loads(text) if text else {}
    except ValueError:
        return {}
    return state if isinstance(state, dict) else {}


def _saved(path: Path, state: State) -> None:
    """`state` written to a temporary file renamed over `path` (a link is
    replaced, never followed)."""
    try:
        fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as file:
                json.dump(state, file)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
    except OSError as error:
        raise _failed(error) from error


def _read_text(path: Path) -> str | None:
    """The file's text, never through a link; None when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError as error:
        if error.errno not in (errno.ENOENT, errno.ELOOP):
            raise _failed(error) from error
        return None
    try:
        with os.fdopen(fd, "rb") as file:
            return file.read().decode()
    except (OSError, UnicodeDecodeError):
        return None


def _failed(error: OSError) -> StoreError:
    return StoreError(f"task store unavailable: {error.strerror or error}", "the store's folder")
