"""Where each task of the file store sits in ListTasks' order: one log,
`.listing/positions.log`, shared by every process on the directory.

A line is a task's position as a write leaves it, `[status time, id, state,
owner, contextId, expires]`, or its removal, `[null, id]`; the last line of
a task is where it stands. Every line is appended under the task's stripe
lock (so a task's lines are in the order of its writes), each write with a
newline before and after it (so a line cut short by a power cut never
swallows the next one), and a reader takes only whole lines, so a line half
written is read once it is whole. The task files stay the truth: a line
says where a task was placed, and `shared.stores.file.listing` checks it
against the task whenever the task is on a page.

Appends hold `.listing/lock` shared; a rewrite (`replace`, the compaction)
holds it alone only to copy what was appended after the lines it folds and
to rename the new log into place, so no append is ever lost to it. A
rewritten log begins with a header line, `{"compacted": time}`, which tells
a reader that finds a new file that the log was folded, not lost.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from shared.store.contract import is_safe_id
from shared.stores.file.locking import flock_within, unlock
from shared.stores.file.log import Durability, open_no_link
from shared.task import Task, epoch, state_of

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
_HEADER = "compacted"
_NOT_TEXT = "\x00not text"


@dataclass(frozen=True)
class Position:
    """A task where a write left it; `changed` None: the task is gone."""

    task_id: str
    changed: float | None
    state: str = ""
    owner: str = ""
    context: str | None = None
    expires: float | None = None  # when a finished task stops being listed

    def agrees(self, task: Task | None) -> bool:
        """Whether `task` (None: gone) stands where this says."""
        if task is None or self.changed is None:
            return task is None and self.changed is None
        return self.same_place(placed(self.task_id, task))

    def same_place(self, other: Position) -> bool:
        return (self.changed, self.state, self.owner, self.context) == (
            other.changed,
            other.state,
            other.owner,
            other.context,
        )


def placed(task_id: str, task: Task, expires: float | None = None) -> Position:
    """Where `task` (the file of `task_id`) sits as it stands. A hand-written
    owner or context that is not text matches no caller's."""
    status = task.get("status")
    stamp = status.get("timestamp", "") if isinstance(status, dict) else ""
    owner, context = task.get("owner", ""), task.get("contextId")
    return Position(
        task_id,
        epoch(stamp),
        state_of(task),
        owner if isinstance(owner, str) else _NOT_TEXT,
        context if context is None or isinstance(context, str) else _NOT_TEXT,
        expires,
    )


def gone(task_id: str) -> Position:
    return Position(task_id, None)


class Cursor(NamedTuple):
    """How far a reader has read: the log's inode (0: no log) and offset."""

    inode: int
    offset: int


@dataclass(frozen=True)
class Read:
    positions: list[Position]
    cursor: Cursor
    restarted: bool  # the log is not the one the cursor was in: these are all of it
    compacted: bool  # and it was rewritten by a compaction (nothing was lost)


class PositionLog:
    def __init__(self, folder: Path, durability: Durability) -> None:
        self.folder = folder
        self.path = folder / "positions.log"
        self._lock = folder / "lock"
        self._durability = durability

    def append(self, positions: Sequence[Position], *, synced: bool = True) -> None:
        """Add `positions` at the end. `synced`: reach the disk as the fsync
        policy says (a write's own line does, before the task file it
        announces; a repair's need not, the next check finds it again)."""
        data = b"".join(b"\n" + _encoded(position) + b"\n" for position in positions)
        with self._held(shared=True):
            fd = open_no_link(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                created = os.fstat(fd).st_size == 0
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if synced:
                    self._durability.written(fd, self.path, created=created)
            finally:
                os.close(fd)

    def read(self, cursor: Cursor | None) -> Read:
        """The positions appended after `cursor`, or the whole log when it is
        not the file the cursor was in (replaced, cut short, deleted), and the
        cursor to read on from."""
        try:
            fd = os.open(self.path, os.O_RDONLY | _NOFOLLOW)
        except FileNotFoundError:
            return Read([], Cursor(0, 0), cursor is None or cursor.inode != 0, False)
        try:
            info = os.fstat(fd)
            restarted = (
                cursor is None or cursor.inode != info.st_ino or cursor.offset > info.st_size
            )
            start = 0 if restarted or cursor is None else cursor.offset
            data = os.pread(fd, info.st_size - start, start) if info.st_size > start else b""
        finally:
            os.close(fd)
        whole = data[: data.rfind(b"\n") + 1]
        positions, compacted = _decoded(whole)
        return Read(positions, Cursor(info.st_ino, start + len(whole)), restarted, compacted)

    def replace(self, positions: Iterable[Position], cursor: Cursor) -> Cursor | None:
        """Rewrite the log as `positions` (the log up to `cursor`, folded),
        then whatever was appended after `cursor`; the cursor just after
        `positions` in the new log, or None when the log is no longer the one
        `cursor` was in (another process rewrote it: left as it is)."""
        header = json.dumps({_HEADER: True}).encode() + b"\n"
        data = header + b"".join(_encoded(position) + b"\n" for position in positions)
        fd, name = tempfile.mkstemp(dir=self.folder, prefix=".positions.", suffix=".tmp")
        temp = Path(name)
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(data)
                with self._held(shared=False):
                    tail = self._after(cursor)
                    if tail is None:
                        temp.unlink()
                        return None
                    file.write(tail)
                    file.flush()
                    if self._durability.files_synced:
                        os.fsync(file.fileno())
                    os.replace(temp, self.path)
                    self._durability.created(self.path)
                    return Cursor(os.fstat(file.fileno()).st_ino, len(data))
        except BaseException:
            temp.unlink(missing_ok=True)
            raise

    def written_before(self, moment: float) -> bool:
        """Whether the log was last written before `moment` (False: no log)."""
        try:
            return os.stat(self.path, follow_symlinks=False).st_mtime < moment
        except FileNotFoundError:
            return False

    def touch(self) -> None:
        """Mark the log as written now (it was checked against every task)."""
        with suppress(FileNotFoundError):
            os.utime(self.path, follow_symlinks=False)

    def _after(self, cursor: Cursor) -> bytes | None:
        """What was appended after `cursor`; None when the log is another file."""
        try:
            fd = os.open(self.path, os.O_RDONLY | _NOFOLLOW)
        except FileNotFoundError:
            return None
        try:
            info = os.fstat(fd)
            if info.st_ino != cursor.inode or info.st_size < cursor.offset:
                return None
            return os.pread(fd, info.st_size - cursor.offset, cursor.offset)
        finally:
            os.close(fd)

    @contextmanager
    def _held(self, *, shared: bool) -> Iterator[None]:
        fd = open_no_link(self._lock, os.O_RDWR | os.O_CREAT)
        try:
            flock_within(fd, self._lock, shared=shared)
            yield
        finally:
            unlock(fd)


def _encoded(position: Position) -> bytes:
    value: list[Any] = (
        [None, position.task_id]
        if position.changed is None
        else [
            position.changed,
            position.task_id,
            position.state,
            position.owner,
            position.context,
            position.expires,
        ]
    )
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _decoded(data: bytes) -> tuple[list[Position], bool]:
    """The positions of whole lines, those that do not parse left out; and
    whether the lines begin with a compaction's header."""
    lines = [line for line in data.split(b"\n") if line.strip()]
    if not lines:
        return [], False
    try:
        # One parse for a whole tail: a log of many thousand lines reads in one call.
        values: list[Any] = json.loads(b"[" + b",".join(lines) + b"]")
    except (ValueError, RecursionError):
        values = []
    if len(values) != len(lines):  # a line cut short opened a list the next ones fell into
        values = [_parsed(line) for line in lines]
    compacted = isinstance(values[0], dict) and values[0].get(_HEADER) is True
    return [p for value in values if (p := _position(value)) is not None], compacted


def _parsed(line: bytes) -> Any:
    try:
        return json.loads(line)
    except (ValueError, RecursionError):
        return None


def _position(value: Any) -> Position | None:
    if not isinstance(value, list) or len(value) < 2 or not isinstance(value[1], str):
        return None
    if not is_safe_id(value[1]):
        return None
    if value[0] is None:
        return gone(value[1])
    if len(value) != 6:
        return None
    changed, task_id, state, owner, context, expires = value
    if not (
        _number(changed)
        and isinstance(state, str)
        and isinstance(owner, str)
        and (context is None or isinstance(context, str))
        and (expires is None or _number(expires))
    ):
        return None
    return Position(
        task_id, float(changed), state, owner, context, None if expires is None else float(expires)
    )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
