"""Wake-ups for the waiters of one process, by task id.

Each store tells its `Notifier` when a task may have new events: the memory
store after each commit, the Redis store when its pub/sub listener hears of
one from any process, the file store when a log file grows (its `Poller`
looks). A wake-up may
say the number of the task's newest event; a waiter that has read that far
already sleeps on, so a stream that is current costs no read. A waiter then
reads the events itself, from the store, by number: a wake-up carries no
data, so a missed or doubled one can delay an event but never lose, reorder
or repeat it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager


class Waiter:
    """One watch of one task; `wait` returns True once `wake` was called
    since the last `wait` returned, with no number or one above `after`,
    and False after `timeout` seconds.

    A thread blocks in `wait`; an event loop cannot, so it asks `on_wake`
    for a callback instead (one that hands over with `call_soon_threadsafe`),
    run on the waking thread at each wake-up."""

    __slots__ = ("_callbacks", "_flag", "_lock", "_newest", "_unknown")

    def __init__(self) -> None:
        self._flag = threading.Event()
        self._lock = threading.Lock()
        self._newest = -1  # the highest event number heard of since the last wait
        self._unknown = False  # woken without a number: something may have changed
        self._callbacks: tuple[Callable[[], object], ...] = ()

    def on_wake(self, callback: Callable[[], object]) -> None:
        """Call `callback` at every wake-up from now on, and at once if one
        came since the last `wait` (none is missed between watch and this)."""
        self._callbacks = (*self._callbacks, callback)
        if self._flag.is_set():
            callback()

    def wake(self, newest: int | None = None) -> None:
        with self._lock:
            if newest is None:
                self._unknown = True
            else:
                self._newest = max(self._newest, newest)
            self._flag.set()
        for callback in self._callbacks:
            callback()

    def wait(self, timeout: float, after: int | None = None) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            self._flag.wait(max(0.0, deadline - time.monotonic()))
            with self._lock:
                self._flag.clear()
                unknown, newest = self._unknown, self._newest
                self._unknown, self._newest = False, -1
            if unknown or (newest >= 0 and (after is None or newest > after)):
                return True
            if time.monotonic() >= deadline:
                return False


class Notifier:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiters: dict[str, set[Waiter]] = {}

    @contextmanager
    def watch(self, task_id: str) -> Iterator[Waiter]:
        waiter = Waiter()
        with self._lock:
            self._waiters.setdefault(task_id, set()).add(waiter)
        try:
            yield waiter
        finally:
            with self._lock:
                waiters = self._waiters.get(task_id)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[task_id]

    def notify(self, task_id: str, newest: int | None = None) -> None:
        """Wake the task's waiters; `newest`: its newest event's number, if known."""
        if task_id not in self._waiters:
            # Most changes have no one watching. A watch registered while
            # this looks is registered after the change was made, and reads
            # it anyway: waiters read the store once watching.
            return
        with self._lock:
            waiters = list(self._waiters.get(task_id, ()))
        for waiter in waiters:
            waiter.wake(newest)

    def notify_all(self) -> None:
        """Wake every waiter (e.g. the connection to other processes was lost
        and regained: events may have been missed, so everyone re-reads)."""
        with self._lock:
            waiters = [w for group in self._waiters.values() for w in group]
        for waiter in waiters:
            waiter.wake()

    def watched(self) -> list[str]:
        with self._lock:
            return list(self._waiters)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(group) for group in self._waiters.values())


class Poller:
    """Wake-ups for a store whose writers tell no other process: one thread
    per store reads each watched task's `stamp` (anything that changes with
    every write) every `every` seconds and wakes the task's waiters when it
    changed.

    What a look compares against is taken when a watch begins, before its
    caller reads the task: a write after that read changes the stamp, one
    before it is already in what the caller read. So a watch that begins on
    a quiet task is never woken for nothing (a late first look is no
    change). A stamp of None (it cannot be had now, e.g. the user's store
    raised) is tried again at the next look, which then wakes the waiters:
    a spurious wake-up costs a read, a missed one a whole wait."""

    def __init__(
        self,
        notifier: Notifier,
        stamp: Callable[[str], Hashable | None],
        *,
        every: float,
        name: str,
    ) -> None:
        self._notifier = notifier
        self._stamp = stamp
        self._every = every
        self._name = name
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._seen: dict[str, Hashable | None] = {}
        self._seen_lock = threading.Lock()

    @contextmanager
    def watch(self, task_id: str) -> Iterator[Waiter]:
        """The task's waiter, with the thread looking (again after a fork)."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
        with self._notifier.watch(task_id) as waiter:
            # Taken once the waiter is registered, so no look forgets it as
            # unwatched; kept if the task has one (another waiter of the task
            # relies on it: a newer stamp could hide a write it has not heard of).
            stamp = self._stamp(task_id)
            with self._seen_lock:
                self._seen.setdefault(task_id, stamp)
            yield waiter

    def _run(self) -> None:
        while True:
            for task_id in self._look():
                self._notifier.notify(task_id)
            time.sleep(self._every)

    def _look(self) -> list[str]:
        """The watched tasks whose stamp changed since the last look (or since
        their watch began); forgets the tasks no longer watched."""
        changed: list[str] = []
        watched = self._notifier.watched()
        for task_id in watched:
            now = self._stamp(task_id)
            if now is None:
                continue
            with self._seen_lock:
                # No stamp yet: its watch is registered but has not stored one,
                # so its caller has read nothing; this look's is its stamp.
                if self._seen.setdefault(task_id, now) != now:
                    self._seen[task_id] = now
                    changed.append(task_id)
        with self._seen_lock:
            for task_id in self._seen.keys() - set(watched):
                del self._seen[task_id]
        return changed
