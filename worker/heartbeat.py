"""Keep a running task's entry in the store's working index fresh."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from shared.errors import StoreError
from shared.store import StaleIndex, TaskStore

log = logging.getLogger(__name__)


@contextmanager
def heartbeating(store: TaskStore, task_id: str, every: float) -> Iterator[None]:
    """Call `store.heartbeat(task_id)` every `every` seconds until the block ends.

    A thread, not a signal, so the beat goes on while the fulfilment function
    blocks in C code or I/O; it dies with the process, which is the point:
    a worker that is gone stops beating and the reaper notices. Stores
    without a stale index get no heartbeat (and no reaper).
    """
    if not isinstance(store, StaleIndex):
        yield
        return
    stop = threading.Event()
    beat = threading.Thread(
        target=_beat,
        args=(store, task_id, every, stop),
        name=f"heartbeat-{task_id}",
        daemon=True,
    )
    beat.start()
    try:
        yield
    finally:
        stop.set()
        beat.join()


def _beat(store: StaleIndex, task_id: str, every: float, stop: threading.Event) -> None:
    while not stop.wait(every):
        try:
            store.heartbeat(task_id)
        except StoreError as error:
            # One missed beat is harmless (stale_after spans several); keep trying.
            log.warning("task %s: heartbeat failed: %s", task_id, error)
