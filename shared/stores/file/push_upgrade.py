"""Push state an earlier version kept in `<directory>/.push/`, taken over
once by the push state written over documents (`shared.push.documents`).

The earlier files: `.push/<task>.json` ({"configs", "cursors", "pushing",
"forget_at"}) and `.push/<task>.leases.json` (short-lived: not carried
over). Each task's file goes once it is taken over, and the folder once
empty, so later starts find nothing to do.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from shared.push.documents import DocumentPush
from shared.store.contract import is_safe_id


def take_over(directory: Path, push: DocumentPush) -> int:
    """Take over what an earlier version kept; the number of tasks taken."""
    folder = directory / ".push"
    if not folder.is_dir() or folder.is_symlink():
        return 0
    taken = 0
    for path in sorted(folder.iterdir()):
        task_id = path.name.removesuffix(".json")
        if path.name.endswith(".json") and not task_id.endswith(".leases") and is_safe_id(task_id):
            state = _read(path)
            if isinstance(state, dict):
                forget_at = state.get("forget_at")
                pushing = bool(state.get("pushing", True))
                forget_in = None
                if not pushing and isinstance(forget_at, int | float):
                    forget_in = max(0.001, forget_at - time.time())
                push.take_over(
                    task_id,
                    dict(state.get("configs") or {}),
                    dict(state.get("cursors") or {}),
                    pushing=pushing,
                    forget_in=forget_in,
                )
                taken += 1
        path.unlink(missing_ok=True)
    # A process of the earlier version still running may have written into it:
    # the next start tidies it.
    with contextlib.suppress(OSError):
        folder.rmdir()
    return taken


def _read(path: Path) -> object:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
