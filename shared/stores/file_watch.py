"""Wake-ups for a file store's waiters when any process writes a watched log.

The store wakes this process's waiters itself after each of its own writes;
other processes' writes are found by a daemon thread that looks at every
watched log's inode and size (a log grows by appends and is replaced by a
trim, a new inode, so the pair changes with every write).

What the thread compares against is taken when a watch begins, before its
caller reads the task: a write after that read shows as a change, one before
it is already in what the caller read. So a watch that begins on a quiet log
is never woken for nothing (a first look by the thread does not count as a
change); a write by this process still wakes its waiters twice, once from
the store and once from the thread, which the `Waiter` contract allows.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from shared.watching import Notifier, Waiter

# A log's identity: (inode, size); (-1, -1) while it does not exist.
Identity = tuple[int, int]


class LogWatcher:
    def __init__(self, log_of: Callable[[str], Path], every: float) -> None:
        """`log_of`: the path of a task's log; `every`: seconds between looks."""
        self.notifier = Notifier()
        self._log_of = log_of
        self._every = every
        self._lock = threading.Lock()  # over `_seen`, and a look as a whole
        self._seen: dict[str, Identity] = {}
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()

    @contextmanager
    def watch(self, task_id: str) -> Iterator[Waiter]:
        self._ensure_running()
        with self.notifier.watch(task_id) as waiter:
            # After the waiter is registered, so no look can drop the baseline
            # as unwatched; kept if there is one (another waiter of the task
            # relies on it: a newer one could hide a write it has not heard of).
            with self._lock:
                self._seen.setdefault(task_id, self._identity(task_id))
            yield waiter

    def _identity(self, task_id: str) -> Identity:
        try:
            info = os.stat(self._log_of(task_id), follow_symlinks=False)
        except OSError:
            return (-1, -1)
        return (info.st_ino, info.st_size)

    def _ensure_running(self) -> None:
        with self._thread_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="toolnexus-file-events", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            for task_id in self._look():
                self.notifier.notify(task_id)
            time.sleep(self._every)

    def _look(self) -> list[str]:
        """The watched tasks whose logs changed since the last look (or since
        their watch began); forgets the tasks no longer watched."""
        changed: list[str] = []
        with self._lock:
            watched = self.notifier.watched()
            for task_id in watched:
                now = self._identity(task_id)
                # No baseline yet: its watch is registered but has not taken
                # the lock, so its caller has read nothing; this look is its
                # baseline (and the watch keeps it).
                if self._seen.setdefault(task_id, now) != now:
                    self._seen[task_id] = now
                    changed.append(task_id)
            for task_id in self._seen.keys() - set(watched):
                del self._seen[task_id]
        return changed
