"""A flock taken within a deadline, never waited on for ever: every lock of the file store.

`flock` is a system call gevent cannot make cooperative: a process that
blocks in it stops every greenlet it runs (a gunicorn worker stops
answering, even /healthz, until its arbiter kills it). A lock whose holder
is paused (SIGSTOP, a debugger, a stalled VM) is never released while it
sleeps. So the lock is tried without blocking, with short waits between
tries that a patched process spends on other greenlets, and given up after
`within` seconds with a StoreError naming the file.

A lock is let go with `unlock`, never by closing its descriptor alone: a
process forked while the lock is held (a Celery prefork child started while
a thread of its parent steps the turn book) keeps a copy of the descriptor,
and a flock lasts until every copy is closed, so the child would hold the
lock for its whole life.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path
from typing import Final

from shared.errors import StoreError

# Long enough for any holder that is running; a paused one is a fault.
WITHIN: Final = 2.0
_PAUSE: Final = 0.002
_PAUSE_MAX: Final = 0.05


def flock_within(fd: int, path: Path, within: float = WITHIN, *, shared: bool = False) -> None:
    """An exclusive (or `shared`) flock on `fd` (the file at `path`), or StoreError."""
    deadline = time.monotonic() + within
    pause = _PAUSE
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise StoreError(
                    f"task store: cannot lock {path}: {error.strerror}",
                    f"the task directory cannot be locked ({error.strerror})",
                ) from None
        if time.monotonic() >= deadline:
            raise StoreError(
                f"task store: {path} stayed locked for {within:g} s (its holder is stalled?)",
                "the task directory stayed locked",
            )
        time.sleep(pause)
        pause = min(pause * 2, _PAUSE_MAX)


def unlock(fd: int) -> None:
    """Let go of the flock on `fd`, then close it. The unlock reaches the lock
    through every copy of the descriptor (a forked child's too), the close
    through this one only."""
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
