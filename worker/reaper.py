"""Fail `working` tasks whose worker stopped heartbeating.

A worker that dies (SIGKILL, OOM, lost host) cannot report anything; its
task would stay `working` forever. The store's working index says when each
running task last heartbeat; anything older than `stale_after` is failed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from shared.errors import StoreError
from shared.store import StaleIndex, TaskStore
from shared.task import WORKING
from shared.transitions import OnTerminal, transition
from worker.fulfil import failed

log = logging.getLogger(__name__)

Clock = Callable[[], float]


def reap_stale(
    store: TaskStore,
    now: float,
    stale_after: float,
    on_terminal: OnTerminal | None = None,
) -> list[str]:
    """Fail every task still `working` whose last heartbeat is older than
    `now - stale_after`; return the ids this call failed.

    On Redis this is one range query over the working index plus one
    compare-and-set per stale task. A worker finishing at the same moment
    races on that compare-and-set: exactly one terminal state is written.
    """
    if not isinstance(store, StaleIndex):
        return []
    reason = f"worker lost: no heartbeat for {stale_after:g} s"
    reaped = []
    for task_id in store.stale(now - stale_after):
        # Only from `working`: a task that asked for input or finished since
        # it was listed is no longer the reaper's business.
        outcome = transition(
            store, task_id, failed(reason), from_states={WORKING}, on_terminal=on_terminal
        )
        if outcome.applied:
            reaped.append(task_id)
        elif outcome.task is None:
            log.warning("reaper: stale entry %s has no readable task", task_id)
    if reaped:
        log.warning("reaper: failed %d stale task(s) (%s): %s", len(reaped), reason, reaped)
    return reaped


class ReaperThread:
    """Runs `reap_stale` every `every` seconds in a daemon thread (embedded mode;
    under Celery, beat schedules the same function instead)."""

    def __init__(
        self,
        store: TaskStore,
        *,
        every: float,
        stale_after: float,
        on_terminal: OnTerminal | None = None,
        clock: Clock,
    ) -> None:
        self._store = store
        self._every = every
        self._stale_after = stale_after
        self._on_terminal = on_terminal
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="toolnexus-reaper", daemon=True)

    def start(self) -> ReaperThread:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            try:
                reap_stale(self._store, self._clock(), self._stale_after, self._on_terminal)
            except StoreError as error:
                log.warning("reaper: store unavailable, will retry: %s", error)
            except Exception:
                log.exception("reaper: unexpected error, will retry")
