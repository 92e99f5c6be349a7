"""Fan-out: a wake-up says the task's newest event number, so a follower that
has read that far reads nothing; a quiet keepalive tick reads nothing; after
the listener loses its channel and subscribes again, only the followers that
missed something are woken."""

from __future__ import annotations

import threading
import time

import redis

from shared.events import to_state
from shared.store.follow import IDLE, follow
from shared.store.wakeups import Waiter
from shared.stores.redis.store import redis_store
from shared.task import WORKING, new_task, text_message
from shared.transitions import transition
from tests.support.polling import wait_for


def test_a_waiter_sleeps_through_news_it_has_already_read() -> None:
    waiter = Waiter()
    waiter.wake(5)
    assert not waiter.wait(0.05, after=5)  # event 5 is read already: keep sleeping
    waiter.wake(6)
    assert waiter.wait(0.05, after=5)
    waiter.wake()  # no number: anything may have changed
    assert waiter.wait(0.05, after=9)
    assert not waiter.wait(0.05, after=9)  # each wake-up counts once


def xranges(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_xrange")
    return int(stats["calls"]) if stats else 0


def test_keepalive_ticks_of_a_current_follower_read_nothing(redis_url: str) -> None:
    store = redis_store(redis_url)
    task_id = store.create(new_task(text_message("user", "hi"))).task["id"]
    following = follow(store, task_id, 0, deadline=time.monotonic() + 30, idle=0.05)
    assert next(following)[0] == 1  # type: ignore[index]
    assert next(following) is IDLE  # (the read after event 1 found nothing more)
    before = xranges(store.client)
    ticks = [next(following) for _ in range(5)]
    assert ticks == [IDLE] * 5
    assert xranges(store.client) == before
    assert transition(store, task_id, to_state(WORKING)).applied
    assert next(following)[0] == 2  # type: ignore[index]  # a real change is read at once


def test_after_a_lost_channel_only_followers_behind_are_woken(redis_url: str) -> None:
    store = redis_store(redis_url, prefix="fanout:")  # a channel of its own
    current = store.create(new_task(text_message("user", "a"))).task["id"]
    behind = store.create(new_task(text_message("user", "b"))).task["id"]
    with store.watch(current) as watch_current, store.watch(behind) as watch_behind:
        watch_current.wait(0), watch_behind.wait(0)  # forget the wake-ups so far
        # The agent writes while the listener is away (its write is published to nobody).
        admin = redis.Redis.from_url(redis_url)
        admin.client_kill_filter(_type="pubsub")
        assert transition(store, behind, to_state(WORKING)).applied
        woke = threading.Event()

        def wait_behind() -> None:
            if watch_behind.wait(10, after=1):
                woke.set()

        waiting = threading.Thread(target=wait_behind)
        waiting.start()
        waiting.join(15)
        assert woke.is_set()  # the follower behind was told, by number or on reconnect
        wait_for(
            lambda: admin.pubsub_numsub(store._channel)[0][1] == 1,
            timeout=10,
            what="the listener to subscribe again",
        )
        assert not watch_current.wait(0.3, after=1)  # the current one was left asleep
