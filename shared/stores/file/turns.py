"""The turn book in a file, beside the file store's tasks (`shared.owners.turns`).

`<directory>/.turns/book.json` holds the whole book (`TurnState` as JSON);
`.turns/.lock` is the lock every step takes (flock, exclusive): the book is
read, the step applied on this machine's clock, and the book written to a
temporary file beside it and renamed into place, so every process on the
directory (one host, or a shared volume with working flock) steps it in
turn, and a reader never sees half a file. Its name starts with a dot, so
it is never a task's (`<id>.json`: an id starts with a letter or a digit).

A book that cannot be read (emptied by a power cut under `fsync=no`, or
edited by hand) starts again empty, with a warning: nothing is lost for
good, since beat's resend holds again every submitted task that is neither
held nor in flight (see `shared.owners.turns`).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from shared.errors import StoreError
from shared.owners.book import SteppedBook, TurnState
from shared.stores.file.locking import flock_within, unlock
from shared.stores.file.log import open_no_link

log = logging.getLogger(__name__)

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
T = TypeVar("T")


class FileTurnBook(SteppedBook):
    """`fsync`: each new book reaches the disk before its rename (the store
    passes whether its fsync policy syncs task files)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        fsync: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._root = Path(directory) / ".turns"  # made by the first step
        self._made = False
        self._path = self._root / "book.json"
        self._lock_path = self._root / ".lock"
        self._fsync = fsync
        self._clock = clock

    def leave(self, task_id: str) -> None:
        """The ended task out of the book, right after the write that ended it
        (under that task's lock, so not in the same step: one that fails, its
        lock held by a stalled process, leaves it to beat's sweep). Nothing
        at all where no book was ever kept."""
        if not self._path.exists():
            return
        try:
            super().leave(task_id)
        except StoreError as error:
            log.info("turn book: task %s stays in flight for beat's sweep: %s", task_id, error)

    # --- internals -----------------------------------------------------------

    def _step(self, step: Callable[[TurnState, float], T]) -> T:
        with self._locked():
            raw = self._raw()
            state = _parsed(raw, self._path)
            result = step(state, self._clock())
            data = json.dumps(state.to_json(), separators=(",", ":")).encode()
            if data != raw:  # (a step that changed nothing writes nothing)
                self._write(data)
        return result

    @contextmanager
    def _locked(self) -> Iterator[None]:
        if not self._made:
            self._root.mkdir(mode=0o700, parents=True, exist_ok=True)
            if self._root.is_symlink():
                raise StoreError(f"task store: {self._root} is a symbolic link; refusing to use it")
            self._made = True
        fd = open_no_link(self._lock_path, os.O_RDWR | os.O_CREAT)
        try:
            flock_within(fd, self._lock_path)
            yield
        finally:
            unlock(fd)

    def _read(self, read: Callable[[TurnState, float], T]) -> T:
        return read(_parsed(self._raw(), self._path), self._clock())

    def _raw(self) -> bytes | None:
        """The book's bytes as last written; None when there is none yet."""
        try:
            fd = os.open(self._path, os.O_RDONLY | _NOFOLLOW)
            with os.fdopen(fd, "rb") as file:
                return file.read()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise StoreError(
                f"task store: cannot read the turn book {self._path}: {error.strerror}",
                f"the task directory cannot be read ({error.strerror})",
            ) from None

    def _write(self, data: bytes) -> None:
        """`data` as the book: a temporary file beside it, renamed into place."""
        temp: str | None = None
        try:
            fd, temp = tempfile.mkstemp(dir=self._root, prefix=".book.", suffix=".tmp")
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                file.flush()
                if self._fsync:
                    os.fsync(file.fileno())
            os.replace(temp, self._path)
            temp = None
        except OSError as error:
            raise StoreError(
                f"task store: cannot write the turn book {self._path}: {error.strerror}",
                f"the task directory cannot be written ({error.strerror})",
            ) from None
        finally:
            if temp is not None:
                Path(temp).unlink(missing_ok=True)


def _parsed(raw: bytes | None, path: Path) -> TurnState:
    if raw is None:
        return TurnState()
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return TurnState.from_json(data)
    except (ValueError, TypeError, AttributeError) as error:
        log.warning("task store: the turn book %s is unreadable (%s): started afresh", path, error)
        return TurnState()
