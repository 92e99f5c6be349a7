"""Losing the PostgreSQL primary: a streaming standby is promoted under writers.

A real primary and a real standby (`pg_basebackup -R`), the store on a URL
naming both (`host1:port1,host2:port2` with `target_session_attrs=read-write`,
so libpq connects to whichever takes writes). Writers create tasks as fast
as they can, each write retried until acknowledged, as a client retries a
send; a follower watches one task through the process's LISTEN connection.
The primary is SIGKILLed, the standby promoted (`pg_ctl promote`, what an
orchestrator does), and then:

- every call fails as "store unavailable" until the promotion, never
  hanging and never acknowledging a write on a dead node;
- the pool drops its connections to the dead primary and opens new ones on
  the promoted standby; `ping` (what `/readyz` reports) names it, and the
  move is counted once;
- the listener listens again there: a commit on the new primary wakes the
  follower;
- with `synchronous_standby_names` (the standby confirms every commit)
  every acknowledged task is on the promoted node; without it the tasks
  the failover lost are counted and printed (the loss window), not
  asserted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from shared.errors import StoreError
from shared.store.resolve import resolve_store
from shared.stores.postgres.store import PostgresStore
from shared.task import COMPLETED, WORKING
from tests.support.failover import Writers, a_task, advance, quiet
from tests.support.polling import wait_for
from tests.support.postgres_pair import PostgresPair

pytestmark = [pytest.mark.timeout(180)]

BEFORE_KILL = 200  # tasks acknowledged before the primary dies


def failovers() -> float:
    sample = REGISTRY.get_sample_value("toolnexus_store_failovers_total", {"store": "postgresql"})
    return sample or 0.0


@pytest.fixture(params=[True, False], ids=["synchronous-standby", "asynchronous"])
def pair(request: pytest.FixtureRequest) -> Iterator[PostgresPair]:
    pair = PostgresPair(synchronous=request.param).start()
    try:
        yield pair
    finally:
        pair.close()


def test_a_promoted_standby_takes_over_and_loses_no_confirmed_task(pair: PostgresPair) -> None:
    store = resolve_store(pair.url)
    assert isinstance(store, PostgresStore)
    assert store.ping() == f"127.0.0.1:{pair.primary_port}"
    followed = a_task()
    followed_id = str(followed["id"])
    store.create(followed)  # type: ignore[arg-type]
    writers = Writers(store)
    failovers_before = failovers()
    with store.watch(followed_id) as waiter:
        seq = advance(store, followed_id, WORKING)
        assert waiter.wait(10, after=seq - 1)  # heard on the first primary
        writers.start()
        try:
            wait_for(lambda: len(writers.acknowledged) >= BEFORE_KILL, timeout=60, what="writes")
            killed = time.monotonic()
            pair.kill_primary()
            # Until the promotion every call fails, naming the cause, and soon.
            began = time.monotonic()
            with pytest.raises(StoreError, match="unavailable"):
                store.read(followed_id)
            assert time.monotonic() - began < 15
            pair.promote()

            def node() -> str | None:
                try:
                    return store.ping()
                except StoreError:
                    return None  # connections to the dead primary still being dropped

            found = wait_for(node, timeout=60, interval=0.1, what="the store on the new primary")
            back_after = time.monotonic() - killed
            assert found == f"127.0.0.1:{pair.standby_port}"
            assert failovers() == failovers_before + 1  # the move, counted once
            acknowledged_before = len(writers.acknowledged)
            wait_for(
                lambda: len(writers.acknowledged) > acknowledged_before + 50,
                timeout=60,
                what="writes on the new primary",
            )
        finally:
            writers.close()
        # The listener listens on the new primary: its commit wakes the follower.
        quiet(waiter)
        seq = advance(store, followed_id, COMPLETED)
        assert waiter.wait(10, after=seq - 1)

    lost = writers.lost()
    print(
        f"\nPostgreSQL failover ({'synchronous standby' if pair.synchronous else 'asynchronous'}):"
        f" acknowledged {len(writers.acknowledged)}, lost {len(lost)};"
        f" writes again {back_after:.2f} s after the kill;"
        f" refusals meanwhile {len(writers.refused)} ({sorted(set(writers.refused))})"
    )
    if pair.synchronous:
        assert lost == []
