"""Beat runs the stale-task reaper itself.

The beat schedule has a `toolnexus.reap_stale` entry like any other, but
a reap sent as a message would wait in the queue behind every fulfilment
already there, for a free worker process: exactly when workers are busy or
dying, the moment it matters. Beat has the same settings and store as the
workers, so this scheduler runs that one entry in the beat process, on
time; every other entry is sent to the workers as usual.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from celery.beat import PersistentScheduler

from shared.broker.dispatcher import PUSH_SWEEP_TASK, REAP_TASK

# Entries beat runs itself (the reaper, and the push sweep for the same reason).
IN_PROCESS = frozenset({REAP_TASK, PUSH_SWEEP_TASK})

log = logging.getLogger(__name__)


class ReapingScheduler(PersistentScheduler):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # The state directory (TOOLNEXUS_STATE_DIR) may not exist yet.
        if schedule := kwargs.get("schedule_filename"):
            Path(schedule).expanduser().parent.mkdir(parents=True, exist_ok=True)
        super().__init__(*args, **kwargs)

    def setup_schedule(self) -> None:
        super().setup_schedule()
        # Once at start-up too: front ends report ready as soon as beat runs.
        self._reap()

    def apply_entry(self, entry: Any, producer: Any = None) -> None:
        if entry.task not in IN_PROCESS:
            super().apply_entry(entry, producer)
            return
        self._run(entry.task, *entry.args, **entry.kwargs)

    def _reap(self) -> None:
        self._run(REAP_TASK)

    def _run(self, name: str, *args: Any, **kwargs: Any) -> None:
        try:
            # Calling a registered task object runs its body here, not on a worker.
            self.app.tasks[name](*args, **kwargs)
        except Exception:
            log.exception("beat: %s failed; it runs again next interval", name)
