"""The one place that turns settings into the objects every process shares:
the task store and the on_task hook.

It is also the one place a store's kind is looked at: a store with the whole
contract (`shared.store.contract.Store`) is used as it is; anything else (a
user's get/save store) is adapted once, here (`shared.store.adapter`), so no
caller checks what a store can do.
"""

from __future__ import annotations

from typing import cast

from shared.errors import ConfigError
from shared.loading import load_object
from shared.owners.book import TurnBook
from shared.settings import Settings
from shared.store.adapter import adapt
from shared.store.contract import Store, is_full_store
from shared.store.resolve import resolve_store
from shared.transitions import OnTerminal


def open_store(
    settings: Settings, given: object = None, *, connections: int | None = None
) -> Store:
    """`given` (a store object or spec) or else TOOLNEXUS_STORE, with the task
    TTL and the file store's fsync policy; `connections` sizes a Redis store's
    pool (a worker holding many calls). A store without the whole contract
    is adapted (`shared.store.adapter.adapt`), which logs what it lacks."""
    spec = settings.store if given is None else given
    store = resolve_store(
        spec,
        terminal_ttl=settings.task_ttl,
        file_fsync=settings.file_fsync,
        connections=connections,
        postgres_pool=settings.pg_pool,
        postgres_notify=settings.pg_notify,
        postgres_timeout=settings.pg_timeout,
        sentinel_password=settings.sentinel_password,
        redis_min_replicas=settings.redis_min_replicas,
        redis_replica_timeout=settings.redis_replica_timeout,
    )
    return cast(Store, store) if is_full_store(store) else adapt(store)


def load_hook(settings: Settings) -> OnTerminal | None:
    """TOOLNEXUS_ON_TASK, imported now so a bad one stops start-up."""
    if not settings.on_task:
        return None
    hook = load_object(settings.on_task, "TOOLNEXUS_ON_TASK")
    if not callable(hook):
        raise ConfigError(f"TOOLNEXUS_ON_TASK: {settings.on_task!r} is not callable")
    return cast(OnTerminal, hook)


def turn_book_of(store: Store) -> TurnBook | None:
    """The store's turn book; None for a user's store that keeps none (a
    whole-contract store of a user's may predate the book)."""
    book = getattr(store, "turn_book", None)
    return book() if callable(book) else None
