"""Small documents an earlier version kept as files, `.documents/<name>.json`
({"version", "value", "expires"}), taken over once by the store's database
(`shared.stores.sql.documents`): the turn book and each task's push state
keep their place; an index kept as a document (`index:<name>`, {member:
score}) becomes the rows of that index. Each file goes once taken over, the
folder once empty (its lock files with it)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from shared.store.contract import is_safe_id
from shared.stores.sqlite.database import Database

_INDEX = "index:"


def take_over(directory: Path, database: Database, clock: Any = time.time) -> int:
    """Take over what an earlier version kept; the number of documents taken."""
    folder = directory / ".documents"
    if not folder.is_dir() or folder.is_symlink():
        return 0
    found: list[tuple[str, Any]] = []
    for path in sorted(folder.glob("*.json")):
        kept = _read(path)
        if isinstance(kept, dict) and isinstance(kept.get("version"), str):
            found.append((path.name.removesuffix(".json"), kept))
    now = clock()

    def write(connection: Any) -> None:
        for name, kept in found:
            expires = kept.get("expires")
            if isinstance(expires, int | float) and expires <= now:
                continue
            value = kept.get("value")
            if name.startswith(_INDEX) and isinstance(value, dict):
                connection.executemany(
                    "INSERT OR IGNORE INTO indexes VALUES (?, ?, ?)",
                    [(name[len(_INDEX) :], m, float(s)) for m, s in value.items()],
                )
            elif value is not None:
                connection.execute(
                    "INSERT OR IGNORE INTO documents VALUES (?, ?, ?, ?)",
                    (name, kept["version"], json.dumps(value), expires),
                )

    database.write(write)
    for path in folder.iterdir():
        if path.suffix in (".json", ".lock", ".tmp") or path.name.endswith(".tmp"):
            path.unlink(missing_ok=True)
    # A process of the earlier version still running may have written into it:
    # the next start takes that over too.
    with contextlib.suppress(OSError):
        folder.rmdir()
    return len(found)


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


# Each marker folder an earlier version kept, and the time index it is now.
_MARKERS = {".working": "working", ".waiting": "waiting", ".interrupted": "interrupted"}


def take_over_markers(directory: Path, database: Database) -> int:
    """The time indexes an earlier version kept as marker files
    (`.working/<id>`, `.waiting/<id>`, `.interrupted/<id>`, each scored by
    its mtime), taken over as rows of those indexes; each file goes once
    taken, the folder once empty. The number of markers taken."""
    found: list[tuple[str, str, float, Path]] = []
    for folder_name, index in _MARKERS.items():
        folder = directory / folder_name
        if not folder.is_dir() or folder.is_symlink():
            continue
        with os.scandir(folder) as entries:
            for entry in entries:
                try:
                    when = entry.stat(follow_symlinks=False).st_mtime
                except FileNotFoundError:
                    continue
                if is_safe_id(entry.name):
                    found.append((index, entry.name, when, Path(entry.path)))
    if found:
        database.write(
            lambda c: c.executemany(
                "INSERT OR IGNORE INTO indexes VALUES (?, ?, ?)",
                [(index, task_id, when) for index, task_id, when, _ in found],
            )
        )
    for *_, path in found:
        path.unlink(missing_ok=True)
    for folder_name in _MARKERS:
        with contextlib.suppress(OSError):
            (directory / folder_name).rmdir()
    return len(found)
