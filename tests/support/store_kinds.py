"""The store kinds the tests run against, in one table.

A test that runs once per store takes the `store_kind` fixture (every kind
in `KINDS`; `@pytest.mark.parametrize("store_kind", SHARED)` narrows it to
the stores several processes share) and opens its stores through the
`stores` fixture (tests/conftest.py), which closes them when the test ends.
A new backend joins every such test with one line in `KINDS`: where its
server comes from, whether processes share it, and how to open it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from shared.store.contract import LOG_LIMIT
from shared.stores.file.store import FileStore
from shared.stores.memory.store import memory_store
from shared.stores.redis.store import redis_store
from shared.stores.sqlite.store import sqlite_store

Clock = Callable[[], float]


@dataclass(frozen=True)
class Options:
    """What a test may set on the store it opens; None keeps the default."""

    clock: Clock | None = None
    terminal_ttl: float | None = None
    log_limit: int | None = None
    connections: int | None = None


@dataclass(frozen=True)
class StoreKind:
    """One backend: `server` is the fixture (tests/conftest.py) that gives
    its server's URL, None for a store that needs no server; `shared` says
    whether several processes can work on one store; `expires_itself`,
    whether finished tasks expire by the server's own clock (a test's clock
    cannot move it) rather than by the reaper's sweep; `slow_trials`,
    whether a test of hundreds of racing trials takes long on it (round
    trips, fsyncs: such a test runs it opt-in, `-m slow`); `opens` opens a store at a
    URL (as `TOOLNEXUS_STORE` writes it) with a test's options."""

    server: str | None
    shared: bool
    expires_itself: bool
    slow_trials: bool
    opens: Callable[[str, Options], Any]


def _memory(url: str, options: Options) -> Any:
    return memory_store(
        options.clock or time.time,
        options.terminal_ttl,
        log_limit=options.log_limit or LOG_LIMIT,
    )


def _file(url: str, options: Options) -> Any:
    return FileStore(
        url.removeprefix("file:"),
        options.clock or time.time,
        options.terminal_ttl,
        log_limit=options.log_limit or LOG_LIMIT,
    )


def _sqlite(url: str, options: Options) -> Any:
    return sqlite_store(
        url.removeprefix("sqlite:///"),
        clock=options.clock or time.time,
        terminal_ttl=options.terminal_ttl,
        log_limit=options.log_limit or LOG_LIMIT,
    )


def _redis(url: str, options: Options) -> Any:
    extra: dict[str, Any] = {}
    if options.connections is not None:
        extra["connections"] = options.connections
    return redis_store(
        url,
        terminal_ttl=options.terminal_ttl,
        clock=options.clock or time.time,
        log_limit=options.log_limit or LOG_LIMIT,
        **extra,
    )


def _postgres(url: str, options: Options) -> Any:
    from shared.stores.postgres import postgres_store

    return postgres_store(
        url,
        terminal_ttl=options.terminal_ttl,
        clock=options.clock or time.time,
        log_limit=options.log_limit or LOG_LIMIT,
        connections=options.connections,
    )


KINDS: Final[dict[str, StoreKind]] = {
    "memory": StoreKind(None, False, expires_itself=False, slow_trials=False, opens=_memory),
    # Each trial's writes fsync.
    "file": StoreKind(None, True, expires_itself=False, slow_trials=True, opens=_file),
    # Each trial's writes fsync.
    "sqlite": StoreKind(None, True, expires_itself=False, slow_trials=True, opens=_sqlite),
    "redis": StoreKind("redis_url", True, expires_itself=True, slow_trials=False, opens=_redis),
    # About 1 ms a round trip here, several per trial.
    "postgres": StoreKind(
        "postgres_url", True, expires_itself=False, slow_trials=True, opens=_postgres
    ),
}
ALL: Final = tuple(KINDS)
SHARED: Final = tuple(name for name, kind in KINDS.items() if kind.shared)
SWEPT: Final = tuple(name for name, kind in KINDS.items() if not kind.expires_itself)


def for_many_trials() -> list[Any]:
    """Every kind as pytest parameters for a test of many racing trials:
    the kinds whose round trips make it minutes long are opt-in (`slow`)."""
    slow = [pytest.mark.slow, pytest.mark.timeout(360)]
    return [
        pytest.param(name, marks=slow if kind.slow_trials else []) for name, kind in KINDS.items()
    ]


class Stores:
    """The stores one test opens, of any kind, closed when it ends: the URL
    of a kind's store for this test (a fresh directory, Redis database or
    PostgreSQL schema), and stores opened on it, as many as the test asks
    for (several objects on one store stand for several processes)."""

    def __init__(self, request: pytest.FixtureRequest, tmp_path: Path) -> None:
        self._request, self._tmp_path = request, tmp_path
        self._opened: list[Any] = []

    def url(self, kind: str) -> str:
        server = KINDS[kind].server
        if server is not None:
            return str(self._request.getfixturevalue(server))
        if kind == "sqlite":
            return f"sqlite:///{self._tmp_path / 'tasks.db'}"
        return "memory" if kind == "memory" else f"file:{self._tmp_path / 'tasks'}"

    def open(
        self,
        kind: str,
        *,
        clock: Clock | None = None,
        terminal_ttl: float | None = None,
        log_limit: int | None = None,
        connections: int | None = None,
    ) -> Any:
        options = Options(clock, terminal_ttl, log_limit, connections)
        store = KINDS[kind].opens(self.url(kind), options)
        self._opened.append(store)
        return store

    def close(self) -> None:
        for store in reversed(self._opened):
            store.close()
        self._opened.clear()
