"""The Redis store on a Sentinel group, through one failover, without a fleet.

A real master, replica and three Sentinels: a task written with
TOOLNEXUS_REDIS_MIN_REPLICAS=1 before the master dies is there after the
promotion; while no master is named every call fails at once as "store
unavailable" (never a hang, never a write acknowledged on a dead master);
afterwards the store writes to the promoted node, `ping` names it, the
move is counted, and the process's event listener hears commits made on
the new master (its pub/sub connection follows the master the Sentinels
name, as the store's own connections do).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY
from redis.sentinel import SentinelConnectionPool, SentinelManagedConnection

from shared.errors import StoreError
from shared.redis_nodes.pools import subscriber_pool
from shared.stores.redis.store import redis_store
from shared.task import COMPLETED, WORKING
from tests.support.failover import Writers, a_task, advance, quiet
from tests.support.polling import wait_for
from tests.support.sentinel import SentinelGroup

pytestmark = [pytest.mark.timeout(120)]

PASSWORD, SENTINEL_PASSWORD = "master-secret", "sentinel-secret"


@pytest.fixture
def group() -> Iterator[SentinelGroup]:
    group = SentinelGroup(password=PASSWORD, sentinel_password=SENTINEL_PASSWORD).start()
    try:
        yield group
    finally:
        group.close()


def failovers() -> float:
    return REGISTRY.get_sample_value("toolnexus_store_failovers_total", {"store": "redis"}) or 0.0


def test_the_store_follows_the_promoted_master(group: SentinelGroup) -> None:
    url = group.url.removesuffix("/0") + "/1"
    store = redis_store(url, sentinel_password=SENTINEL_PASSWORD, min_replicas=1)
    assert f":{group.master.port} (master 'toolnexus' via Sentinel)" in store.ping()
    task = a_task()
    task_id = str(task["id"])
    store.create(task)  # type: ignore[arg-type]
    before = failovers()

    with store.watch(task_id) as waiter:
        seq = advance(store, task_id, WORKING)
        assert waiter.wait(10, after=seq - 1)  # heard on the first master

        group.kill_master()
        # Until Sentinel names a new master every call fails, naming the cause
        # (it does not wait for one: a hang fails the test by its timeout).
        with pytest.raises(StoreError, match="unavailable"):
            store.read(task_id)
        promoted = group.wait_for_failover()
        group.rejoin_old_master(promoted)  # a replica confirms writes again

        def node() -> str | None:
            try:
                return store.ping()
            except StoreError:
                return None  # connections to the dead node still being dropped

        found = wait_for(node, timeout=30, interval=0.1, what="the store on the promoted master")
        # The master the Sentinels name now: on a loaded machine they can judge
        # the promoted node down too (down-after 1 s) and fail over again, to
        # the old master now in sync; the store must follow that one as well.
        current = group.master_address()
        assert current is not None and found.startswith(f"{current[0]}:{current[1]} ")
        assert failovers() >= before + 1

        # The acknowledged write survived; a commit on the new master is heard
        # (once a replica is in sync with it: after a second failover the
        # other node resynchronises first, and min_replicas=1 waits for it).
        quiet(waiter)
        group.wait_in_sync()
        seq = advance(store, task_id, COMPLETED)
        assert waiter.wait(10, after=seq - 1)
    record = store.read(task_id)
    assert record is not None and record.task["status"]["state"] == COMPLETED


def test_ping_names_the_node_that_took_its_write_not_the_master_last_heard_of(
    group: SentinelGroup,
) -> None:
    """Around a failover the pool's master as last heard can lag behind the
    node its connections use (a discovery answered late sets the old one
    back). Readiness names the node that took the ping's write."""
    store = redis_store(group.url, sentinel_password=SENTINEL_PASSWORD)
    assert store.ping().startswith(f"127.0.0.1:{group.master.port} ")
    pool = store.client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    pool.proxy.master_address = ("127.0.0.1", group.replica.port)  # heard of, not used
    assert store.ping().startswith(f"127.0.0.1:{group.master.port} ")


def test_the_listener_pool_follows_the_master_sentinel_names(group: SentinelGroup) -> None:
    """The subscriber pool keeps redis-py's Sentinel-managed connections (and
    the pool's proxy that tells them where the master is): the listener's
    failover depends on both, so this fails by name if redis-py moves them."""
    store = redis_store(group.url, sentinel_password=SENTINEL_PASSWORD)
    pool = store.client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    subscribers = subscriber_pool(pool)
    assert subscribers.connection_class is SentinelManagedConnection
    assert subscribers.connection_kwargs["connection_pool"] is pool.proxy
    assert subscribers.connection_kwargs["socket_timeout"] is None
    connection = subscribers.get_connection()
    try:
        assert connection.port == group.master.port
    finally:
        subscribers.release(connection)


@pytest.mark.parametrize("min_replicas", [1, 0], ids=["min-replicas-1", "asynchronous"])
def test_writers_through_a_failover_lose_nothing_confirmed(
    group: SentinelGroup, min_replicas: int
) -> None:
    """Four writers as fast as the store takes them, the master killed under
    them: with a replica confirming every write none of the acknowledged
    tasks is lost; without, the ones the promoted replica never had are
    counted (Redis replicates asynchronously: the loss window)."""
    url = group.url.removesuffix("/0") + "/1"
    store = redis_store(url, sentinel_password=SENTINEL_PASSWORD, min_replicas=min_replicas)
    writers = Writers(store).start()
    try:
        wait_for(lambda: len(writers.acknowledged) >= 300, timeout=60, what="writes")
        group.kill_master()
        promoted = group.wait_for_failover()
        if min_replicas:
            # Writes wait on a replica's confirmation, so the old master comes
            # back as one. Without that the promoted node takes writes alone:
            # a full resync under four unpaced writers only slows them.
            group.rejoin_old_master(promoted)
        before = len(writers.acknowledged)
        wait_for(lambda: len(writers.acknowledged) > before + 100, timeout=60, what="writes again")
    finally:
        writers.close()
    lost = writers.lost()
    print(
        f"\nRedis failover, store alone (min replicas {min_replicas}): acknowledged"
        f" {len(writers.acknowledged)}, lost {len(lost)}"
    )
    if min_replicas:
        assert lost == []
