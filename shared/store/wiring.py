"""The one place that turns settings into the objects every process shares:
the task store and the on_task hook."""

from __future__ import annotations

from typing import cast

from shared.errors import ConfigError
from shared.loading import load_object
from shared.settings import Settings
from shared.store.contract import Store
from shared.store.resolve import resolve_store
from shared.transitions import OnTerminal


def open_store(
    settings: Settings, given: object = None, *, connections: int | None = None
) -> Store:
    """`given` (a store object or spec) or else TOOLNEXUS_STORE, with the task
    TTL and the file store's fsync policy; `connections` sizes a Redis store's
    pool (a worker holding many calls)."""
    spec = settings.store if given is None else given
    store = resolve_store(
        spec,
        terminal_ttl=settings.task_ttl,
        file_fsync=settings.file_fsync,
        connections=connections,
        postgres_pool=settings.pg_pool,
        postgres_notify=settings.pg_notify,
    )
    return cast(Store, store)


def load_hook(settings: Settings) -> OnTerminal | None:
    """TOOLNEXUS_ON_TASK, imported now so a bad one stops start-up."""
    if not settings.on_task:
        return None
    hook = load_object(settings.on_task, "TOOLNEXUS_ON_TASK")
    if not callable(hook):
        raise ConfigError(f"TOOLNEXUS_ON_TASK: {settings.on_task!r} is not callable")
    return cast(OnTerminal, hook)
