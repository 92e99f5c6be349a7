"""TOOLNEXUS_REDIS_MIN_REPLICAS: a write counts as done only once a replica holds it.

A real master and a real replica (`--replicaof`): with the replica
answering, every acknowledged write (a created task, a commit, a push
config and cursor) is on the replica the moment the call returns; with the
replica paused (SIGSTOP: connected, answering nothing) the same write is
refused as NotReplicated, naming the setting, and counted, instead of
being acknowledged on the master's word alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from shared.errors import NotReplicated
from shared.push.contract import Cursor
from shared.store.contract import Created
from shared.stores.redis.store import RedisStore, redis_store
from tests.support.failover import a_task
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer


@pytest.fixture
def pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    master = RedisServer(args=["--repl-diskless-sync-delay", "0"]).start()
    replica = RedisServer(args=["--replicaof", "127.0.0.1", str(master.port)]).start()
    wait_for(
        lambda: master.online_replicas() == 1,
        timeout=10,
        what="the replica to be in sync",
    )
    try:
        yield master, replica
    finally:
        replica.resume()
        replica.close()
        master.close()


def unreplicated() -> float:
    return (
        REGISTRY.get_sample_value("toolnexus_store_unreplicated_writes_total", {"store": "redis"})
        or 0.0
    )


def test_an_acknowledged_write_is_already_on_the_replica(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    master, replica = pair
    store: RedisStore = redis_store(master.url, min_replicas=1, replica_timeout=2.0)
    on_replica = redis_store(replica.url)
    task = a_task()
    store.create(task)  # type: ignore[arg-type]
    # No wait: the call returned only after the replica confirmed it.
    assert on_replica.get(str(task["id"])) is not None
    pushes = store.push_store()
    assert pushes is not None
    pushes.put({"id": "hook", "taskId": str(task["id"]), "url": "https://example.com/"}, 10)
    pushes.set_cursor(str(task["id"]), "hook", Cursor(delivered=3))
    replica_pushes = on_replica.push_store()
    assert replica_pushes is not None
    assert replica_pushes.cursor(str(task["id"]), "hook").delivered == 3
    assert store.ping().startswith("127.0.0.1:")


def test_a_write_no_replica_confirms_is_refused_not_acknowledged(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    master, replica = pair
    store = redis_store(master.url, min_replicas=1, replica_timeout=0.3)
    before = unreplicated()
    replica.pause()
    task = a_task()
    began = time.monotonic()
    with pytest.raises(NotReplicated, match="TOOLNEXUS_REDIS_MIN_REPLICAS") as refused:
        store.create(task, "message-1")  # type: ignore[arg-type]
    assert time.monotonic() - began < 5  # bounded by the setting, not hung
    assert refused.value.reason == "replicas did not confirm a write in time"
    assert unreplicated() == before + 1
    with pytest.raises(NotReplicated):
        store.ping()  # /readyz says so before the next send hears it
    replica.resume()

    # A retry with the same message finds the task the master kept, now confirmed.
    def retried() -> Created | None:
        try:
            return store.create(a_task(), "message-1")  # type: ignore[arg-type]
        except NotReplicated:
            return None  # the replica is catching up after its pause

    again = wait_for(retried, timeout=10, interval=0.1, what="the retry to be confirmed")
    assert (again.created, again.task["id"]) == (False, task["id"])
    assert redis_store(replica.url).get(str(task["id"])) is not None


def test_without_the_setting_the_master_alone_acknowledges(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    master, replica = pair
    store = redis_store(master.url)
    replica.pause()
    task = a_task()
    assert store.create(task).created  # type: ignore[arg-type]
