"""A compose-run stack whose store a test can take away and bring back,
whatever its kind: the stack's private Redis is stopped (or SIGKILLed) and
started again; the machine's PostgreSQL, which others use, stays up and is
cut off behind a TCP proxy instead (`compose.store_behind_proxy`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from shared.store.contract import Store
from tests.support.compose import Backends, LocalStack, local_stack, store_behind_proxy


@dataclass(frozen=True)
class StoreOutage:
    stack: LocalStack
    # The test's own view of the store, which the outage does not reach
    # (past the proxy): what it finds afterwards is what the stack left.
    store: Store
    take_away: Callable[[], object]
    bring_back: Callable[[], object]
    what: str


@contextmanager
def store_outage_stack(
    folder: Path, settings: Mapping[str, str], backends: Backends, *, crash: bool = False
) -> Iterator[StoreOutage]:
    """`crash`: Redis is SIGKILLed rather than stopped (a proxy's cut is
    always abrupt: every connection reset at once)."""
    if backends.store_kind == "redis":
        with local_stack(folder, settings, appendonly=True, backends=backends) as (redis, stack):
            # With another broker, Redis is the store alone.
            what = "Redis" if backends.broker_kind == "redis" else "the Redis store"
            away = redis.kill if crash else redis.stop
            yield StoreOutage(stack, stack.open_store(), away, redis.start, what)
        return
    with (
        store_behind_proxy(backends) as (proxied, proxy),
        local_stack(folder, settings, backends=proxied) as (_, stack),
    ):
        store = stack.open_store(backends.store_url)
        what = f"the {backends.store_kind} store"
        yield StoreOutage(stack, store, proxy.refuse, proxy.start, what)
