"""The file store's per-task event logs: `.log/<id>.jsonl`, one line each.

A line is an event, `{"seq":n,"event":{...}}`, or a snapshot marker,
`{"seq":n,"snapshot":{"digest":...,"file":[inode,size,mtime]}}`: the task
file with that content (see `shared.stores.file.store`) includes the events up
to n. A marker is appended, with the events of its change, before its task
file is renamed into place, so whichever task file a reader finds, the
marker naming it is already in the log. The guarantees:

- An append is whole lines or nothing: a short write is continued, a failed
  one is cut back to where it began (and raises StoreError), and a line
  without its newline (a crash, a full disk, a truncated file) is ignored
  by every read and cut off by the next append.
- A read costs the tail it returns: the file is read backwards, block by
  block, until the first line at or before what it needs, so a commit reads
  one block of a long log, not the whole of it.
- The log is trimmed to the last LOG_LIMIT events (the memory and Redis
  stores keep as many) in one atomic rewrite each time it has grown by half
  as many again, never dropping an event its task file does not include.
- Durability follows the fsync policy, like Redis's `appendfsync`:
  `always` (the default): every append reaches the disk before the write
  returns, and so do a new task's files, so a power cut loses nothing that
  was acknowledged; `everysec`: the logs are synced once a second (a power
  cut loses at most about the last second of events); `no`: the operating
  system writes back when it will. Under `always` and `everysec` a task
  file's content is synced before its rename, so it is never found empty.
  A process that crashes loses nothing under any policy. Numbers that a
  power cut took with it are never handed out again: the store starts a
  new lineage, from a higher base, for a log from before the boot
  (`restart`, see `shared.stores.file.store`).
"""

from __future__ import annotations

import errno
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from shared.codec import decode, encode
from shared.errors import StoreError
from shared.events import Event
from shared.store.contract import LOG_LIMIT
from shared.store.spec import ALWAYS, EVERYSEC, FSYNC_POLICIES, NO

log = logging.getLogger(__name__)


_BLOCK = 64 * 1024
_LINE = re.compile(rb'\{"seq":(\d+),"(event|snapshot)":')
_ANY_LINE = re.compile(rb'\{"seq":(\d+),')
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class Marker(NamedTuple):
    """A task file: the last event it includes, its content's digest and its
    inode, size and mtime (what a stat compares)."""

    seq: int
    digest: str
    file: tuple[int, ...]


class Scan(NamedTuple):
    """The log as it stands against one task file: `base` the last event the
    file includes (None: no marker names it), `events` those after `base`,
    `last` the number of the last whole event line (0: none), `latest`
    whether the marker found is the log's newest."""

    events: list[tuple[int, Event]]
    base: int | None
    last: int
    latest: bool


class Durability:
    """When what the store writes is forced to the disk (see the module doc)."""

    def __init__(self, policy: str = ALWAYS, interval: float = 1.0) -> None:
        if policy not in FSYNC_POLICIES:
            raise ValueError(f"fsync policy {policy!r}: use one of {', '.join(FSYNC_POLICIES)}")
        self.policy = policy
        self._interval = interval
        self._pending: set[Path] = set()
        self._lock = threading.Lock()
        self._flusher: threading.Thread | None = None

    @property
    def inline(self) -> bool:
        """Whether each append is synced before it returns."""
        return self.policy == ALWAYS

    @property
    def files_synced(self) -> bool:
        """Whether a task file's content is synced before its rename."""
        return self.policy != NO

    def written(self, fd: int, path: Path, *, created: bool) -> None:
        """`fd` (open on `path`) was written; `created`: the file is new, so
        its directory entry must reach the disk too."""
        if self.policy == ALWAYS:
            os.fsync(fd)
            if created:
                _sync_path(path.parent)
        elif self.policy == EVERYSEC:
            self._later(path, path.parent if created else None)

    def created(self, path: Path) -> None:
        """A new file was renamed onto `path`: its directory entry must reach
        the disk (a replaced file needs no more; its marker is in the log)."""
        if self.policy == ALWAYS:
            _sync_path(path.parent)
        elif self.policy == EVERYSEC:
            self._later(path.parent)

    def _later(self, *paths: Path | None) -> None:
        with self._lock:
            self._pending.update(p for p in paths if p is not None)
            if self._flusher is None or not self._flusher.is_alive():
                self._flusher = threading.Thread(
                    target=self._flush_forever, name="toolnexus-file-fsync", daemon=True
                )
                self._flusher.start()

    def flush(self) -> None:
        """Sync everything written since the last flush (`everysec`)."""
        with self._lock:
            pending, self._pending = self._pending, set()
        for path in sorted(pending, key=lambda p: len(p.parts), reverse=True):  # files first
            _sync_path(path)

    def _flush_forever(self) -> None:
        while True:
            time.sleep(self._interval)
            self.flush()


class LogFiles:
    """The event logs in `folder`, one file per task."""

    def __init__(self, folder: Path, durability: Durability, limit: int = LOG_LIMIT) -> None:
        self.folder = folder
        self._durability = durability
        self._limit = limit

    def path(self, task_id: str) -> Path:
        return self.folder / f"{task_id}.jsonl"

    def tail(self, task_id: str, after: int) -> list[tuple[int, Event]]:
        """The events numbered above `after`, oldest first."""
        events: list[tuple[int, Event]] = []
        for seq, marker, line in _lines_backwards(self.path(task_id)):
            if marker:
                continue
            if seq <= after:
                break
            _decoded(events, seq, line, task_id)
        events.reverse()
        return events

    def last(self, task_id: str) -> int:
        """The number of the log's last whole event line (0: none)."""
        return next(
            (seq for seq, marker, _ in _lines_backwards(self.path(task_id)) if not marker), 0
        )

    def latest(self, task_id: str) -> tuple[Marker | None, int]:
        """The newest marker and the number of the last event, reading back
        only as far as that marker."""
        last = 0
        for seq, marker, line in _lines_backwards(self.path(task_id)):
            if not marker:
                last = last or seq
                continue
            found = _marker(seq, line)
            if found is not None:
                return found, last
        return None, last

    def scan(self, task_id: str, digest: str) -> Scan:
        """The events after the marker of the task file whose content has
        `digest`, read back only as far as that marker and the events it
        includes (the whole log when no marker names the file)."""
        events: list[tuple[int, Event]] = []
        base: int | None = None
        last, latest, markers = 0, False, 0
        for seq, marker, line in _lines_backwards(self.path(task_id)):
            if marker:
                found = _marker(seq, line) if base is None else None
                if found is not None:
                    markers += 1
                    if found.digest == digest:
                        base, latest = found.seq, markers == 1
                continue
            last = last or seq
            if base is not None and seq <= base:
                break
            _decoded(events, seq, line, task_id)
        events.reverse()
        if base is not None:
            events = [(seq, event) for seq, event in events if seq > base]
        return Scan(events, base, last, latest)

    def append(
        self, task_id: str, first: int, events: Sequence[Event], marker: Marker | None
    ) -> None:
        """Append `events` numbered `first` on, then `marker`, whole or not
        at all (the caller holds the task's lock)."""
        lines = _lines(first, events, marker)
        if not lines:
            return
        path = self.path(task_id)
        fd = open_no_link(path, os.O_RDWR | os.O_APPEND | os.O_CREAT)
        try:
            start = _cut_torn_line(fd, path)
            try:
                _write_all(fd, b"".join(lines))
            except OSError as error:
                os.ftruncate(fd, start)  # nothing of this append stays
                raise StoreError(
                    f"task store: cannot append to {path.name}: {error.strerror}",
                    f"the task directory cannot be written ({error.strerror})",
                ) from None
            self._durability.written(fd, path, created=start == 0)
        finally:
            os.close(fd)
        last = first + len(events) - 1
        if events and last - self._first(path) + 1 >= self._limit + self._limit // 2:
            self._trim(task_id)

    def restart(self, task_id: str, first: int, events: Sequence[Event], marker: Marker) -> None:
        """Replace the log with `events` numbered `first` on and `marker`, in
        one atomic rename (the caller holds the task's lock): a new lineage,
        whose numbers do not run on from the old one's, so none of the old
        lines is kept (a reader behind them gets the task instead)."""
        self._replace(self.path(task_id), b"".join(_lines(first, events, marker)))

    def _first(self, path: Path) -> int:
        """The number of the log's first line, from its head."""
        try:
            fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
        except OSError:
            return 0
        try:
            found = _ANY_LINE.match(os.pread(fd, 64, 0))
        finally:
            os.close(fd)
        return int(found.group(1)) if found else 0

    def _trim(self, task_id: str) -> None:
        """Rewrite the log as its last `limit` events, atomically (a reader
        has the old file or the new), keeping the newest marker and every
        event after the one it names (the caller made the newest marker the
        task file's own), however many."""
        path = self.path(task_id)
        kept: list[bytes] = []
        events = 0
        newest: int | None = None
        for seq, marker, line in _lines_backwards(path):
            if marker:
                if newest is None:
                    newest = seq
                    kept.append(line + b"\n")
                continue
            if events >= self._limit and newest is not None and seq <= newest:
                break
            kept.append(line + b"\n")
            events += 1
        kept.reverse()
        self._replace(path, b"".join(kept))
        log.debug("task store: trimmed the log of task %s to %d events", task_id, events)

    def _replace(self, path: Path, data: bytes) -> None:
        """`path` holds `data` or what it had before, whatever happens."""
        fd, temp = tempfile.mkstemp(dir=self.folder, prefix=f".{path.name}.", suffix=".tmp")
        try:
            _write_all(fd, data)
            if self._durability.inline:
                os.fsync(fd)
            os.close(fd)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise


def _lines(first: int, events: Sequence[Event], marker: Marker | None) -> list[bytes]:
    """`events` as log lines numbered `first` on, then `marker`'s line."""
    lines = [
        f'{{"seq":{first + n},"event":{encode(event)}}}\n'.encode()
        for n, event in enumerate(events)
    ]
    if marker is not None:
        shown = {"digest": marker.digest, "file": list(marker.file)}
        lines.append(f'{{"seq":{marker.seq},"snapshot":{encode(shown)}}}\n'.encode())
    return lines


def _decoded(into: list[tuple[int, Event]], seq: int, line: bytes, task_id: str) -> None:
    try:
        into.append((seq, decode(line)["event"]))
    except (ValueError, TypeError, KeyError):
        log.warning("task store: skipping unreadable event %d of task %s", seq, task_id)


def _marker(seq: int, line: bytes) -> Marker | None:
    try:
        shown = decode(line)["snapshot"]
        digest, file = shown["digest"], shown["file"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(digest, str) or not isinstance(file, list):
        return None
    return Marker(seq, digest, tuple(file))


def _lines_backwards(path: Path) -> Iterator[tuple[int, bool, bytes]]:
    """The log's whole lines (without their newline), last first, each with
    its number and whether it is a marker, reading the file block by block
    from its end. Bytes after the last newline are a line cut short and are
    not yielded; nor is a line of neither kind."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError as error:
        if error.errno == errno.ELOOP:
            log.warning("task store: ignoring the symbolic link %s", path)
        return
    try:
        end = os.fstat(fd).st_size
        carry = b""
        in_torn_tail = True  # until the last newline: the bytes after it are no line
        while end > 0:
            start = max(0, end - _BLOCK)
            block = os.pread(fd, end - start, start) + carry
            end = start
            pieces = block.split(b"\n")
            if in_torn_tail:
                pieces.pop()  # after the last newline: "" or (part of) a line cut short
                if not pieces:
                    carry = b""
                    continue
                in_torn_tail = False
            # The first piece may continue in the block before: keep it back.
            carry = pieces.pop(0) if end > 0 else b""
            for line in reversed(pieces):
                found = _LINE.match(line)
                if found is not None:
                    yield int(found.group(1)), found.group(2) == b"snapshot", line
    finally:
        os.close(fd)


def _cut_torn_line(fd: int, path: Path) -> int:
    """Cut off whatever follows the file's last newline (a line a crash left
    unfinished); the size the file then has."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    end = size
    while end > 0:
        start = max(0, end - _BLOCK)
        block = os.pread(fd, end - start, start)
        newline = block.rfind(b"\n")
        if newline >= 0:
            end = start + newline + 1
            break
        end = start
    if end != size:
        log.warning("task store: cutting a torn last line (%d bytes) off %s", size - end, path)
        os.ftruncate(fd, end)
    return end


def _write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written (a write may take fewer)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "write wrote nothing")
        view = view[written:]


def open_no_link(path: Path, flags: int) -> int:
    """`os.open` that refuses a symbolic link (StoreError, logged); files it
    creates only this user reads."""
    try:
        return os.open(path, flags | _NOFOLLOW, 0o600)
    except OSError as error:
        if error.errno == errno.ELOOP:
            log.warning("task store: refusing to follow the symbolic link %s", path)
            raise StoreError(f"task store: {path.name} is a symbolic link") from None
        raise


def _sync_path(path: Path) -> None:
    """fsync a file or a directory by name; one that is gone needs none."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError as error:
        log.warning("task store: fsync of %s failed: %s", path, error.strerror)
    finally:
        os.close(fd)
