"""Another process holding every lock of a file store's directory, as a
process paused in the middle of a step would: until it is killed, every
step of every other process waits for a lock, and gives up after its
deadline (`shared.stores.file.locking`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_HOLDER = """
import fcntl, os, sys, time
from pathlib import Path
root = Path(sys.argv[1])
import sqlite3
from shared.stores.file.store import DATABASE
files = sorted((root / ".locks").glob("*")) if root.is_dir() else []
held = []
# The database's write lock (the documents: the turn book, the send limits, push;
# of a SQLite store, given its database, every write).
database = sqlite3.connect(root / DATABASE if root.is_dir() else root, isolation_level=None)
database.execute("BEGIN IMMEDIATE")
held.append(database)
for path in files:
    if path.exists():
        fd = os.open(path, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
print(len(held), flush=True)
while True:
    time.sleep(60)
"""


def hold_locks(directory: Path, *, within: float = 30.0) -> subprocess.Popen[str]:
    """A process holding every lock file under `directory` (the stripes, the
    listing's, the database's write lock), or of a SQLite store's database
    file, its write lock; returned once it holds them all."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(directory)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    try:
        line = _line_within(holder, within)
    except BaseException:
        holder.kill()
        raise
    if not line.strip().isdigit():
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
