"""A task folder an earlier version wrote, taken over into the database once.

The earlier file store kept each task's events in `.log/<id>.jsonl` (lines
`{"seq": n, "event": {...}}`, and `{"seq": n, "snapshot": {"digest": ...}}`
naming the `<id>.json` content that includes the events up to n), message
keys in `.messages/<key>` (a task id), each finished task's expiry as the
mtime of `.expires/<id>`, and the reaper's last run in `.beat`. Each task
file with no row becomes one: its log's events, its document as the file
holds it, the events after the marker naming the file folded over it (a
file no marker names is the task as it stands, its status the next event,
as the earlier store read it). Tasks written by hand or by the seed's store
(a bare file, no log) are taken the same way. It all commits in one
transaction, so a second process opening the folder at once finds it done,
and the earlier files go afterwards (a crash between the two takes over
nothing twice: a task with a row is skipped).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from shared.events import Event, current_status
from shared.store.contract import is_safe_id
from shared.task import Task

log = logging.getLogger(__name__)

# The folders and files of the earlier layout that hold nothing once taken over.
EARLIER = (".log", ".messages", ".contexts", ".expires", ".listing", ".locks", ".beat")

# What the store does with a taken task: write its row, events and indexes
# inside the transaction (connection, task id, task as the file holds it,
# the event it holds the task at, the events after it, every logged event,
# expiry, the file's bytes).
Logged = list[tuple[int, Event]]
Adopt = Callable[[Any, str, Task, int, Logged, Logged, Any, bytes], None]


def earlier_layout(directory: Path) -> bool:
    return any((directory / name).exists() for name in EARLIER)


def take_over(
    connection: Any, directory: Path, adopt: Adopt, digest: Callable[[bytes], str]
) -> int:
    """Inside a write transaction: every task file without a row, taken; the
    number taken."""
    kept = {row[0] for row in connection.execute("SELECT id FROM tasks")}
    taken = 0
    for path in sorted(directory.glob("*.json")):
        task_id = path.name.removesuffix(".json")
        if task_id in kept or not is_safe_id(task_id) or path.is_symlink():
            continue
        raw = _bytes(path)
        task = task_in(raw, task_id)
        if raw is None or task is None:
            continue  # unreadable: it reads as an unknown task, as it did
        logged = _logged(directory / ".log" / f"{task_id}.jsonl")
        base = next((n for n, name in logged.markers if name == digest(raw)), _wrapped_at(raw))
        after: Logged
        if base is None:
            base = logged.events[-1][0] if logged.events else 0
            after = [(base + 1, current_status(task))]
        else:
            after = [(n, e) for n, e in logged.events if n > base]
        expiry = _mtime(directory / ".expires" / task_id)
        adopt(connection, task_id, task, base, after, [*logged.events, *after], expiry, raw)
        taken += 1
    for path in sorted((directory / ".messages").glob("*")):
        task_id = (_bytes(path) or b"").decode(errors="replace")
        if is_safe_id(task_id):  # the earlier store's record is the one that holds
            connection.execute("UPDATE tasks SET mkey = NULL WHERE mkey = ?", (path.name,))
            connection.execute("UPDATE tasks SET mkey = ? WHERE id = ?", (path.name, task_id))
    beat = _bytes(directory / ".beat")
    with contextlib.suppress(ValueError):
        if beat:
            connection.execute("INSERT OR REPLACE INTO times VALUES ('reaper', ?)", (float(beat),))
    connection.execute("INSERT OR IGNORE INTO contexts SELECT context, owner FROM tasks")
    return taken


def clear_earlier(directory: Path) -> None:
    """The earlier layout's files, once their content is in the database."""
    for name in EARLIER:
        path = directory / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()


class _Log:
    def __init__(self) -> None:
        self.events: list[tuple[int, Event]] = []
        self.markers: list[tuple[int, str]] = []


def _logged(path: Path) -> _Log:
    """The whole lines of a task's log (a cut last line is left out)."""
    found = _Log()
    raw = _bytes(path) or b""
    for line in raw.split(b"\n")[:-1]:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("seq"), int):
            continue
        if isinstance(entry.get("event"), dict):
            found.events.append((entry["seq"], entry["event"]))
        elif isinstance(entry.get("snapshot"), dict):
            found.markers.append((entry["seq"], str(entry["snapshot"].get("digest"))))
    return found


def _wrapped_at(raw: bytes) -> int | None:
    """The number an older wrapper file `{"seq": n, "task": {...}}` holds its task at."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    wrapped = isinstance(value, dict) and "status" not in value and "task" in value
    return value["seq"] if wrapped and isinstance(value.get("seq"), int) else None


def task_in(raw: bytes | None, task_id: str) -> Task | None:
    """The task a file holds (an older wrapper `{"seq": n, "task": {...}}` unwrapped)."""
    try:
        value = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    if isinstance(value, dict) and "status" not in value and isinstance(value.get("task"), dict):
        value = value["task"]
    if not isinstance(value, dict) or not isinstance(value.get("status"), dict):
        return None
    if value.get("id", task_id) != task_id or not isinstance(value["status"].get("state"), str):
        return None
    return cast(Task, {**value, "id": task_id})


def _mtime(path: Path) -> float | None:
    try:
        return os.stat(path, follow_symlinks=False).st_mtime
    except OSError:
        return None


def _bytes(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        try:
            return file.read()
        except OSError:
            return None
