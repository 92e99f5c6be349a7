"""The send limiters every built-in store keeps (`shared.owners.admission`),
each on its real backend: memory and file with an injected clock, Redis and
PostgreSQL by their server's clock, with short real waits.

The token bucket: full at first, one token a take, refilled at its rate and
never past its size, the wait until the next token told when empty, one
bucket per owner. The active set: ids up to the cap, the reserved ids with
their ages at the cap, an id reserved again is no new slot, released
ids free theirs. Both hold under threads racing on separate connections (or
descriptors: the file store's lock is per open file). `accepted` names the
task an accepted message made, and nothing once that task is gone.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from shared.events import to_state
from shared.owners.admission import SendLimiter
from shared.store.contract import message_key
from shared.task import COMPLETED, WORKING, new_task, text_message
from shared.transitions import transition
from tests.support.polling import wait_for
from tests.support.store_kinds import KINDS, Stores


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Backend:
    """A store and its limiter; `advance` moves the limiter's clock on: the
    fake one at once, a server's by waiting."""

    kind: str
    store: Any
    limiter: SendLimiter
    clock: FakeClock | None
    others: list[Any]  # more stores on the same data (each its own connections)
    stores: Stores

    def advance(self, seconds: float) -> None:
        if self.clock is not None:
            self.clock.now += seconds
        else:
            time.sleep(seconds)

    def another_limiter(self) -> SendLimiter:
        """The same limiter reached through another store object (another
        connection pool, or other file descriptors); memory's is the one."""
        if not self.others:
            return self.limiter
        return self.others.pop().send_limiter()  # type: ignore[no-any-return]


@pytest.fixture
def backend(store_kind: str, stores: Stores) -> Backend:
    kind = KINDS[store_kind]
    # A store with no server keeps time by the process's clock, which a test moves.
    clock = FakeClock() if kind.server is None else None
    ttl = 1 if kind.expires_itself else 10
    opened = [
        stores.open(store_kind, clock=clock, terminal_ttl=ttl, connections=2)
        for _ in range(9 if kind.shared else 1)
    ]
    first = opened[0]
    return Backend(store_kind, first, first.send_limiter(), clock, opened[1:], stores)


# --- the token bucket ----------------------------------------------------------


def test_a_bucket_is_full_at_first_and_tells_the_wait_once_empty(backend: Backend) -> None:
    limiter = backend.limiter
    rate = 0.5 if backend.clock is not None else 2.0  # a server's clock moves while we take
    assert [limiter.take("alice", rate, 3) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = limiter.take("alice", rate, 3)
    assert 0 < wait <= 1 / rate
    if backend.clock is not None:
        assert wait == pytest.approx(1 / rate)
    assert limiter.take("alice", rate, 3) > 0  # a refusal takes nothing, and costs nothing
    backend.advance(wait + 0.01)
    assert limiter.take("alice", rate, 3) == 0.0
    assert limiter.take("alice", rate, 3) > 0


def test_a_bucket_refills_at_its_rate_and_never_past_its_size(backend: Backend) -> None:
    limiter, rate = backend.limiter, 4.0
    # On a server's clock a loaded machine may take longer than a token's
    # refill between two takes; such a try says nothing, and a fresh owner
    # tries again.
    for attempt in range(20):
        owner, started = f"alice-{attempt}", time.monotonic()
        takes = [limiter.take(owner, rate, 2) for _ in range(3)]
        if backend.clock is not None or time.monotonic() - started < 0.8 / rate:
            break
    else:
        pytest.fail("no three takes within a token's refill in 20 tries")
    assert takes[:2] == [0.0, 0.0] and takes[2] > 0, takes
    backend.advance(0.75)  # three tokens' worth: the bucket holds two
    assert [limiter.take(owner, rate, 2) for _ in range(3)][:2] == [0.0, 0.0]
    if backend.clock is not None:
        backend.advance(0.125)  # half a token
        assert limiter.take(owner, rate, 2) == pytest.approx(0.125)
        backend.advance(0.125)
        assert limiter.take(owner, rate, 2) == 0.0


def test_each_owner_has_a_bucket_of_its_own(backend: Backend) -> None:
    limiter = backend.limiter
    assert limiter.take("alice", 0.01, 1) == 0.0
    assert limiter.take("alice", 0.01, 1) > 0
    assert limiter.take("bob", 0.01, 1) == 0.0
    assert limiter.take("", 0.01, 1) == 0.0  # the anonymous owner of a service without tokens


def test_racing_takes_through_several_connections_get_the_bucket_once(backend: Backend) -> None:
    limiters = [backend.limiter, *(backend.another_limiter() for _ in range(3))]
    won: list[float] = []
    start = threading.Barrier(8)

    def taker(limiter: SendLimiter) -> None:
        start.wait()
        for _ in range(5):
            won.append(limiter.take("racer", 0.001, 12))

    threads = [threading.Thread(target=taker, args=(limiters[n % 4],)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 40 and won.count(0.0) == 12


# --- the active set ------------------------------------------------------------


def test_ids_are_reserved_up_to_the_cap_then_the_reserved_ones_come_back(backend: Backend) -> None:
    limiter = backend.limiter
    assert limiter.reserve("alice", "t1", 2) is None
    backend.advance(1.0 if backend.clock is not None else 0.2)
    assert limiter.reserve("alice", "t2", 2) is None
    assert limiter.reserve("alice", "t1", 2) is None  # reserved already: no second slot
    reserved = limiter.reserve("alice", "t3", 2)
    assert reserved is not None and set(reserved) == {"t1", "t2"}
    assert all(age >= 0 for age in reserved.values())
    if backend.clock is not None:
        assert reserved == {"t1": pytest.approx(1.0), "t2": pytest.approx(0.0)}
    else:
        assert reserved["t1"] >= reserved["t2"] + 0.15
    assert limiter.reserve("bob", "t9", 2) is None  # another owner's set
    limiter.release("alice", "t1", "never-reserved")
    assert limiter.reserve("alice", "t3", 2) is None
    reserved = limiter.reserve("alice", "t4", 2)
    assert reserved is not None and set(reserved) == {"t2", "t3"}
    limiter.release("alice", "t2", "t3")
    limiter.release("nobody", "t2")  # an owner with nothing reserved: no error
    assert limiter.reserve("alice", "t4", 1) is None


def test_racing_reservations_through_several_connections_fill_the_cap_once(
    backend: Backend,
) -> None:
    limiters = [backend.limiter, *(backend.another_limiter() for _ in range(3))]
    won: list[str] = []
    start = threading.Barrier(8)

    def reserver(n: int) -> None:
        start.wait()
        for i in range(5):
            if limiters[n % 4].reserve("racer", f"t{n}-{i}", 7) is None:
                won.append(f"t{n}-{i}")

    threads = [threading.Thread(target=reserver, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 7
    reserved = backend.limiter.reserve("racer", "one-more", 7)
    assert reserved is not None and sorted(reserved) == sorted(won)


# --- a message's task ------------------------------------------------------------


def test_accepted_names_the_task_a_message_made_while_it_is_kept(backend: Backend) -> None:
    store, limiter = backend.store, backend.limiter
    key = message_key("alice", "m-1")
    assert limiter.accepted(key) is None
    task = new_task(text_message("user", "hello", messageId="m-1"), None, "alice")
    assert store.create(task, key).created
    assert limiter.accepted(key) == task["id"]
    assert limiter.accepted(message_key("bob", "m-1")) is None  # another caller's id
    for state in (WORKING, COMPLETED):
        assert transition(store, task["id"], to_state(state)).applied
    assert limiter.accepted(key) == task["id"]  # finished, but kept
    if backend.clock is not None:
        backend.advance(11)  # past the time to live
        assert limiter.accepted(key) is None
    elif not KINDS[backend.kind].expires_itself:
        # The store's clock reads the expiry: one a minute on is past it.
        later = backend.stores.open(backend.kind, clock=lambda: time.time() + 60)
        assert later.send_limiter().accepted(key) is None
    else:
        wait_for(lambda: limiter.accepted(key) is None, timeout=10, what="the task to expire")
