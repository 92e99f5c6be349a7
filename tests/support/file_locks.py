"""Another process holding the write lock of a file or SQLite store's
database, as a process paused in the middle of a write would: until it is
killed, every write of every other process waits for it, and gives up
after its deadline (`shared.stores.sqlite.database`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_HOLDER = """
import sqlite3, sys, time
from pathlib import Path
root = Path(sys.argv[1])
from shared.stores.file.store import DATABASE
database = sqlite3.connect(root / DATABASE if root.is_dir() else root, isolation_level=None)
database.execute("BEGIN IMMEDIATE")
print("held", flush=True)
while True:
    time.sleep(60)
"""


def hold_locks(directory: Path, *, within: float = 30.0) -> subprocess.Popen[str]:
    """A process holding the write lock of the file store in `directory`, or
    of the SQLite store whose database `directory` is; returned once it holds it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(directory)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    try:
        line = _line_within(holder, within)
    except BaseException:
        holder.kill()
        raise
    if line.strip() != "held":
        holder.kill()
        raise AssertionError(f"the lock holder said {line!r}")
    return holder


def _line_within(holder: subprocess.Popen[str], within: float) -> str:
    import selectors

    assert holder.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(holder.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=within):
            raise AssertionError(f"the lock holder held nothing within {within:g} s")
    return holder.stdout.readline()
