"""A worker bootstep that keeps the worker's slots in the fleet tally
(`shared.ops.fleet_tally`) while it consumes: the console's fleet page
counts the live workers and their slots from it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import bootsteps

from shared.ops.fleet_tally import WorkerPresence
from shared.settings import Settings
from shared.store.contract import Store
from shared.store.wiring import abilities_of


def fleet_presence(settings: Settings, store: Callable[[], Store]) -> type[bootsteps.StartStopStep]:
    """The step, for a worker of these settings on the store `store()` opens."""

    class FleetPresence(bootsteps.StartStopStep):  # type: ignore[misc]
        requires = ("celery.worker.components:Pool",)

        def __init__(self, worker: Any, **kwargs: Any) -> None:
            super().__init__(worker, **kwargs)
            self.presence: WorkerPresence | None = None

        def start(self, worker: Any) -> None:
            # A delivery-only worker (`-Q push`) runs no agent: no slots to show.
            consuming = getattr(worker.app.amqp.queues, "consume_from", None)
            if consuming and settings.queue not in consuming:
                return
            documents = abilities_of(store()).documents
            if documents is None:
                return
            slots = int(getattr(worker, "concurrency", 1) or 1)
            self.presence = WorkerPresence(documents, str(worker.hostname), slots).start()

        def stop(self, worker: Any) -> None:
            if self.presence is not None:
                self.presence.stop()
                self.presence = None

    return FleetPresence
