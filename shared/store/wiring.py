"""The one place that turns settings into the objects every process shares:
the task store and the on_task hook.

It is also the one place a store's kind is looked at: a store with the whole
contract (`shared.store.contract.Store`) is used as it is; anything else (a
user's get/save store) is adapted once, here (`shared.store.adapter`), so no
caller checks what a store can do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, cast

from shared.documents import Documents
from shared.errors import ConfigError
from shared.indexes import Indexes
from shared.loading import load_object
from shared.owners.book import Entry, ReleaseOnCommit, TurnBook
from shared.settings import Settings
from shared.store.adapter import adapt
from shared.store.contract import (
    CONTRACT,
    Created,
    ReadsOnLoop,
    Store,
    TaskReadsOnLoop,
)
from shared.store.resolve import resolve_store
from shared.task import Task
from shared.transitions import OnTerminal

if TYPE_CHECKING:
    from shared.broker.outbox import OutboxMessage
    from shared.owners.admission import SendLimiter


def open_store(
    settings: Settings, given: object = None, *, connections: int | None = None
) -> Store:
    """`given` (a store object or spec) or else TOOLNEXUS_STORE, with the task
    TTL and the file store's fsync policy; `connections` sizes a Redis store's
    pool (a worker running many I/O calls). A store without the whole contract
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
    if is_full_store(store):
        return cast(Store, store)
    closing = getattr(store, "close", None)  # the user's own, if it has one
    return adapt(store, close=closing if callable(closing) else None)


def load_hook(settings: Settings) -> OnTerminal | None:
    """TOOLNEXUS_ON_TASK, imported now so a bad one stops start-up."""
    if not settings.on_task:
        return None
    hook = load_object(settings.on_task, "TOOLNEXUS_ON_TASK")
    if not callable(hook):
        raise ConfigError(f"TOOLNEXUS_ON_TASK: {settings.on_task!r} is not callable")
    return cast(OnTerminal, hook)


# `create_held(task, message_key, entry, fair, outbox)`: a store's create that
# also holds the task in its turn book, and queues `outbox` if it took the task,
# else keeps it for the step that does (shared.stores.redis.store); a store
# whose broker is never its own server takes no outbox (shared.stores.sqlite.store).
CreateHeld = Callable[[Task, "str | None", Entry, bool, "OutboxMessage | None"], Created]


@dataclass(frozen=True)
class Abilities:
    """What a store can do beyond the contract, read once here: the
    processes take these at their wiring and never ask the store again.

    `turn_book`: its book of fair turns (`shared.owners.turns`), None where
    it keeps none; `send_limiter`: its owners' send limits, None where it
    keeps none (no limit can be set); `create_held`: a create that holds the
    task in its book in the same step (Redis, SQLite, file); `loop_reads`: what makes a
    reader of tasks from an event loop (`ReadsOnLoop`), None where it cannot
    read that way; `redis_server`: the Redis server it is a database of (a
    broker there can queue a send's message with its write);
    `release_on_commit`: where its book can, how a process's writes that
    take a task out of flight release it in the same round trip (Redis's
    book; `Turns.release_with_writes`); `indexes`: its scored indexes
    (`shared.indexes`), where it keeps the newest failures
    (`shared.failures`), None where it keeps none."""

    turn_book: TurnBook | None = None
    send_limiter: SendLimiter | None = None
    create_held: CreateHeld | None = None
    loop_reads: Callable[[], TaskReadsOnLoop | None] | None = None
    redis_server: tuple[object, ...] | None = None
    release_on_commit: ReleaseOnCommit | None = None
    # its small documents (`shared.documents`), where every worker adds to the
    # fleet tally (`shared.ops.fleet_tally`); None where it keeps none
    documents: Documents | None = None
    indexes: Indexes | None = None


def abilities_of(store: Store) -> Abilities:
    """The store's abilities, by the methods it has. `create_held` and
    `redis_server` are read on its class: a wrapper passing unknown names on
    to a store it wraps would otherwise skip its own create. A user's store
    with the whole contract may predate the book and the limiter."""
    book_of, limiter = getattr(store, "turn_book", None), getattr(store, "send_limiter", None)
    book = book_of() if callable(book_of) else None
    held = getattr(type(store), "create_held", None)
    on_server = getattr(type(store), "redis_server", None) is not None
    return Abilities(
        turn_book=book,
        send_limiter=limiter() if callable(limiter) else None,
        create_held=partial(held, store) if callable(held) else None,
        loop_reads=store.loop_reads if isinstance(store, ReadsOnLoop) else None,
        redis_server=getattr(store, "redis_server", None) if on_server else None,
        release_on_commit=getattr(book, "release_on_commit", None),
        documents=_small_documents(getattr(store, "documents", None)),
        indexes=_scored_indexes(getattr(store, "indexes", None)),
    )


def _scored_indexes(found: object) -> Indexes | None:
    if callable(getattr(found, "place", None)) and callable(getattr(found, "range", None)):
        return cast(Indexes, found)
    return None


def _small_documents(found: object) -> Documents | None:
    if callable(getattr(found, "document", None)) and callable(getattr(found, "swap", None)):
        return cast(Documents, found)
    return None


def is_full_store(candidate: object) -> bool:
    """Whether `candidate` has the whole contract (`lists_by_scan` included)."""
    return hasattr(candidate, "lists_by_scan") and all(
        callable(getattr(candidate, name, None)) for name in CONTRACT
    )
