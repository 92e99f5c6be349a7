"""Small documents (`shared.documents`) in files, shared by every
process on the store's directory.

Each document is `.documents/<name>.json` ({"version", "value", "expires"}),
written whole to a temporary file renamed over it while its lock is held
with `flock` (within a deadline, as every lock of this store): one of a
fixed set of stripes, `.documents/stripe-<n>.lock`, chosen by the name's
digest, so lock files never pile up as documents come and go; a read
takes no lock, since a rename is seen whole or not at all. A document
that cannot be read (a crash before the rename reached the disk) is not
there. The clock is the store's (the
machine's, or machines that share the volume and keep their clocks in step).
"""

from __future__ import annotations

import errno
import json
import os
import re
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from shared.documents import ABSENT, Document, new_version
from shared.errors import StoreError
from shared.keys import digest
from shared.stores.file.locking import flock_within, unlock
from shared.stores.file.log import open_no_link

_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_NOFOLLOW: Final = os.O_NOFOLLOW | os.O_CLOEXEC
# Lock files shared by the documents: enough that unrelated steps seldom meet.
STRIPES: Final = 16


class FileDocuments:
    def __init__(self, directory: Path, clock: Callable[[], float] = time.time) -> None:
        """`directory`: the store's."""
        self._folder = directory / ".documents"
        self._clock = clock
        self._made = False

    def document(self, name: str) -> Document:
        now = self._clock()
        version, value = self._current(self._path(name), now)
        return Document(version, value, now)

    def swap(self, name: str, version: str, value: Any, ttl: float | None = None) -> bool:
        path = self._path(name)
        lock = self.lock_path(name)
        try:
            self._make()
            fd = open_no_link(lock, os.O_RDWR | os.O_CREAT)
        except OSError as error:
            raise _failed(error) from error
        try:
            flock_within(fd, lock)
            now = self._clock()
            if self._current(path, now)[0] != version:
                return False
            if value is None:
                path.unlink(missing_ok=True)
            else:
                expires = None if ttl is None else now + ttl
                _written(path, {"version": new_version(), "value": value, "expires": expires})
            return True
        except OSError as error:
            raise _failed(error) from error
        finally:
            unlock(fd)

    def forget_expired(self) -> None:
        """Delete the documents past their time (a read already skips them),
        each under its lock, as a swap would."""
        try:
            paths = sorted(self._folder.glob("*.json"))
        except OSError as error:
            raise _failed(error) from error
        for path in paths:
            if self._current(path, self._clock())[0] != ABSENT or _read(path) is None:
                continue
            lock = self.lock_path(path.name.removesuffix(".json"))
            try:
                fd = open_no_link(lock, os.O_RDWR | os.O_CREAT)
            except OSError as error:
                raise _failed(error) from error
            try:
                flock_within(fd, lock)
                if self._current(path, self._clock())[0] == ABSENT:
                    path.unlink(missing_ok=True)
            except OSError as error:
                raise _failed(error) from error
            finally:
                unlock(fd)

    def _make(self) -> None:
        """The folder, made at the first write (a store with no documents has none)."""
        if not self._made:
            self._folder.mkdir(mode=0o700, exist_ok=True)
            if self._folder.is_symlink():
                raise StoreError(f"task store: {self._folder} is a symbolic link; refusing it")
            self._made = True

    def lock_path(self, name: str) -> Path:
        """The lock file a write of the document `name` holds."""
        return self._folder / f"stripe-{int(digest(name)[:8], 16) % STRIPES}.lock"

    def _path(self, name: str) -> Path:
        if _NAME.fullmatch(name) is None:
            raise ValueError(f"not a document name: {name!r}")
        return self._folder / f"{name}.json"

    @staticmethod
    def _current(path: Path, now: float) -> tuple[str, Any]:
        kept = _read(path)
        if not isinstance(kept, dict) or not isinstance(kept.get("version"), str):
            return ABSENT, None
        expires = kept.get("expires")
        if isinstance(expires, int | float) and expires <= now:
            return ABSENT, None
        return kept["version"], kept.get("value")


def _read(path: Path) -> Any:
    """The file's JSON, never through a link; None when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError as error:
        if error.errno not in (errno.ENOENT, errno.ELOOP):
            raise _failed(error) from error
        return None
    try:
        with os.fdopen(fd, "rb") as file:
            return json.loads(file.read())
    except (OSError, ValueError):
        return None


def _written(path: Path, content: Any) -> None:
    """`content` written to a temporary file renamed over `path` (a link is
    replaced, never followed)."""
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(content, file)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _failed(error: OSError) -> StoreError:
    return StoreError(f"task store unavailable: {error.strerror or error}", "the store's folder")
