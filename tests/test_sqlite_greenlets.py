"""The greenlets of a gevent-patched process share one SQLite connection a
thread (`shared.stores.sqlite.database`), one at a time: a greenlet that
yields inside a transaction keeps the others out of it until it ends, and
a write that waits for another process's lock lets this process's reads
go on meanwhile. Run in a child process that gevent patches first, on a
real database file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PATCHED = """
from gevent import monkey

monkey.patch_all()

import pathlib
import sqlite3
import sys
import time

import gevent

from shared.stores.sqlite import database
from shared.stores.sqlite.store import SqliteStore

path = sys.argv[1]
db = database.Database(
    pathlib.Path(path), ["CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v TEXT)"]
)

# Twenty greenlets writing and reading: one connection in all.
def busy(n):
    db.write(lambda c: c.execute("INSERT INTO t VALUES (?, 'x')", (f"k{n}",)))
    assert db.read("SELECT v FROM t WHERE k = ?", (f"k{n}",)) == [("x",)]
    assert db.snapshot(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) >= 1

gevent.joinall([gevent.spawn(busy, n) for n in range(20)], raise_error=True)
mine = [c for c in database._OPEN if c.execute("PRAGMA database_list").fetchone()[2] == path]
assert len(mine) == 1, f"{len(mine)} connections for one thread's greenlets"

# A greenlet that yields inside its write: the others wait for its commit,
# and never read what it has not committed.
seen = []

def slow_writer():
    def change(c):
        c.execute("INSERT INTO t VALUES ('slow', 'uncommitted')")
        gevent.sleep(0.2)
        c.execute("UPDATE t SET v = 'committed' WHERE k = 'slow'")
    db.write(change)

def reader():
    seen.append(db.read("SELECT v FROM t WHERE k = 'slow'"))

writer = gevent.spawn(slow_writer)
gevent.sleep(0.05)
readers = [gevent.spawn(reader) for _ in range(3)]
gevent.joinall([writer, *readers], raise_error=True)
assert seen == [[("committed",)]] * 3, seen

# Another process's write lock (a connection of its own, in a real thread):
# a write here waits for it, and this process's reads go on meanwhile.
start_new_thread = monkey.get_original("_thread", "start_new_thread")
allocate_lock = monkey.get_original("_thread", "allocate_lock")  # OS locks, across threads
held, let_go = allocate_lock(), allocate_lock()
held.acquire()
let_go.acquire()

def other():
    c = sqlite3.connect(path, isolation_level=None, timeout=0)
    c.execute("BEGIN IMMEDIATE")
    held.release()
    let_go.acquire(timeout=5)
    c.execute("COMMIT")
    c.close()

start_new_thread(other, ())
assert held.acquire(timeout=5)
done = []
waiting = gevent.spawn(
    lambda: (db.write(lambda c: c.execute("INSERT INTO t VALUES ('late', 'x')")), done.append("w"))
)
gevent.sleep(0.1)
assert not done, "the write went through another process's lock"
began = time.monotonic()
assert db.read("SELECT v FROM t WHERE k = 'slow'") == [("committed",)]
assert time.monotonic() - began < 0.5, "a read waited for the write waiting on the lock"
let_go.release()
waiting.join(5)
assert done == ["w"], "the write did not go through once the lock was let go"

# The store over it: a task written and read back from several greenlets.
store = SqliteStore(pathlib.Path(path + ".store"))
from shared.task import new_task, text_message

def round_trip(n):
    task = store.save(new_task(text_message("user", f"g{n}")))
    assert store.get(task["id"])["history"][0]["parts"][0]["text"] == f"g{n}"

gevent.joinall([gevent.spawn(round_trip, n) for n in range(10)], raise_error=True)
print("ok")
"""


def test_greenlets_share_a_thread_s_connection_one_at_a_time(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PATCHED), str(tmp_path / "shared.db")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"
