"""ListTasks pages hold still while tasks change, on every store, and on
Redis a page costs a page, not a read of every task."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient

from shared import Settings
from shared.events import to_state
from shared.store.contract import message_key
from shared.store.listing import Query, list_by_scan, stamp_after
from shared.stores.redis.store import redis_store
from shared.task import epoch, new_task, text_message
from shared.transitions import transition
from tests.support.polling import wait_for
from tests.support.store_kinds import Stores
from tests.test_web_support import PlayingDispatcher, rpc
from web import create_app


@pytest.fixture
def store(store_kind: str, stores: Stores) -> Any:
    return stores.open(store_kind)


def client_for(store: Any) -> FlaskClient:
    return create_app(
        Settings(), store=store, dispatcher=PlayingDispatcher(store, auto=False)
    ).test_client()


def fill(store: Any, count: int, owner: str = "", context: str | None = None) -> list[str]:
    ids = []
    for n in range(count):
        task = new_task(text_message("user", f"t{n}"), context, owner or None)
        ids.append(store.create(task, message_key(owner, f"m-{n}-{context}")).task["id"])
    return ids


def page_through(
    client: FlaskClient,
    size: int,
    between: Callable[[], None] = lambda: None,
    **filters: Any,
) -> tuple[list[str], list[int]]:
    """Every page of one listing; `between` runs after each page but the last."""
    seen: list[str] = []
    totals: list[int] = []
    token = ""
    while True:
        params = {"pageSize": size, "pageToken": token, **filters}
        result = rpc(client, "ListTasks", params, version="1.0")["result"]
        seen += [task["id"] for task in result["tasks"]]
        totals.append(result["totalSize"])
        token = result["nextPageToken"]
        if not token:
            return seen, totals
        between()


class Churn:
    """A thread changing random tasks one after another, counting its changes,
    so the paging can wait for some to land between two of its pages."""

    def __init__(self, store: Any, ids: list[str]) -> None:
        self.store, self.ids = store, ids
        self.changes = 0
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> Churn:
        self._thread.start()  # before the first page: changes in flight at its moment
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        rng = random.Random(7)
        while not self._stop.is_set():
            task_id = rng.choice(self.ids)
            transition(self.store, task_id, to_state("working"))
            transition(
                self.store, task_id, lambda t: to_state("working", text_message("agent", "m"))(t)
            )
            with self._changed:
                self.changes += 1
                self._changed.notify_all()
            # A breath between changes: at full speed this thread held the GIL
            # so long, and grew every task's history so fast, that each page
            # (which reads every task whole on the memory and file stores) took
            # longer than the last, and a run could pass 120 s.
            self._stop.wait(0.0005)

    def more(self, count: int = 3) -> None:
        """Return once the churn has made `count` more changes."""
        with self._changed:
            target = self.changes + count
            assert self._changed.wait_for(lambda: self.changes >= target, timeout=60)


def test_every_task_appears_exactly_once_while_tasks_keep_changing(store: Any) -> None:
    ids = fill(store, 120)
    client = client_for(store)
    gaps: list[int] = []
    late: list[str] = []

    with Churn(store, ids) as churn:

        def between_pages() -> None:
            before = churn.changes
            churn.more()  # changes land between every two pages, however slow the machine
            gaps.append(churn.changes - before)
            if not late:  # created after the listing began: not in it
                late.extend(fill(store, 5, context="late"))

        seen, totals = page_through(client, 7, between_pages)
    # The churn overlapped the paging: changes between each pair of pages.
    assert len(gaps) == len(totals) - 1 == 17 and min(gaps) >= 3
    assert late and not set(late) & set(seen)
    assert sorted(seen) == sorted(ids)  # none skipped, none twice
    assert set(totals) == {120}  # one listing, one total


def test_a_change_stamped_before_the_listing_and_saved_after_its_first_page_is_not_skipped(
    store: Any,
) -> None:
    """The race the churn test met once in CI: a change computed (its status
    stamped) just before a listing's moment, saved just after the first page
    was read without it. As of the listing's moment the task had not changed,
    so it stays where the first page placed it: every store files such a
    status just after the latest listing moment as it saves it."""
    ids = fill(store, 10)
    client = client_for(store)
    oldest = ids[0]  # last in newest-first order: on the last page
    record = store.read(oldest)
    assert record is not None
    change = to_state("working")
    stamped_early = change(record.task)  # its status timestamp: now, before the listing
    stamp = epoch(stamped_early[0]["status"]["timestamp"])
    # The listing's moment is read from this clock: once it is past the stamp, so is that.
    wait_for(lambda: time.time() > stamp, what="the clock past the change's status timestamp")
    first = rpc(client, "ListTasks", {"pageSize": 3}, version="1.0")["result"]
    assert oldest not in [task["id"] for task in first["tasks"]]
    saved = transition(store, oldest, lambda _: stamped_early)
    assert saved.applied
    seen = [task["id"] for task in first["tasks"]]
    token = first["nextPageToken"]
    while token:
        page = rpc(client, "ListTasks", {"pageSize": 3, "pageToken": token}, version="1.0")
        seen += [task["id"] for task in page["result"]["tasks"]]
        token = page["result"]["nextPageToken"]
    assert sorted(seen) == sorted(ids)  # the changed one too, once


class SlowWriters:
    """Threads that each compute a change (stamping its status) and save it a
    few milliseconds later, as a worker does between its read and its
    commit: listings keep beginning between a stamp and its save."""

    def __init__(self, store: Any, ids: list[str], count: int = 4) -> None:
        self.store, self.ids = store, ids
        self.saved = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(seed,)) for seed in range(count)]

    def __enter__(self) -> SlowWriters:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _run(self, seed: int) -> None:
        rng = random.Random(seed)

        def late(task: Any) -> Any:
            events = to_state("working", text_message("agent", "m"))(task)
            self._stop.wait(rng.uniform(0, 0.004))  # stamped now, saved later
            return events

        while not self._stop.is_set():
            transition(self.store, rng.choice(self.ids), late)
            self.saved += 1


def test_listings_begun_between_a_stamp_and_its_save_skip_nothing(store: Any) -> None:
    """Many listings while writers save changes stamped a moment before:
    every walk returns every task exactly once."""
    ids = fill(store, 40)
    for task_id in ids:
        transition(store, task_id, to_state("working"))
    client = client_for(store)
    wrong: list[tuple[int, int]] = []
    with SlowWriters(store, ids) as writers:
        wait_for(lambda: writers.saved >= 20, timeout=30, what="the writers under way")
        # A store that lists by reading every task walks slower: fewer walks.
        # Walks go on until the writers saved 100 changes meanwhile, however
        # fast this machine runs the walks against the writes.
        walks = 10 if getattr(store, "lists_by_scan", False) else 40
        deadline = time.monotonic() + 60
        walk = 0
        while walk < walks or writers.saved < 100:
            assert time.monotonic() < deadline, f"{writers.saved} changes saved in 60 s"
            seen, _ = page_through(client, 4)
            if sorted(seen) != sorted(ids):
                wrong.append((walk, len(set(ids) - set(seen))))
            walk += 1
        assert writers.saved >= 100  # the writes overlapped the walks
    assert wrong == []  # (walk, tasks it skipped)


def test_filters_hold_still_too(store: Any) -> None:
    ids = fill(store, 30, context="c-1")
    fill(store, 10, context="c-2")
    client = client_for(store)
    for task_id in ids[:12]:
        transition(store, task_id, to_state("working"))
    seen, totals = page_through(client, 5, contextId="c-1", status="TASK_STATE_WORKING")
    assert sorted(seen) == sorted(ids[:12]) and set(totals) == {12}
    seen, totals = page_through(client, 4, status="TASK_STATE_SUBMITTED")
    assert len(seen) == len(set(seen)) == 28 and set(totals) == {28}


def test_each_caller_lists_only_its_own_tasks(store: Any) -> None:
    mine = fill(store, 8, owner="alice")
    fill(store, 5, owner="bob")
    client = create_app(
        Settings(api_tokens=("alice:a-token", "bob:b-token")),
        store=store,
        dispatcher=PlayingDispatcher(store, auto=False),
    ).test_client()
    reply = rpc(
        client,
        "ListTasks",
        {"pageSize": 100},
        version="1.0",
        headers={"Authorization": "Bearer a-token"},
    )["result"]
    assert sorted(task["id"] for task in reply["tasks"]) == sorted(mine)
    assert reply["totalSize"] == 8


def test_a_redis_page_reads_the_page_not_every_task(redis_url: str) -> None:
    store = redis_store(redis_url)
    big = "x" * 100_000
    for n in range(60):
        store.create(new_task(text_message("user", big)), message_key("", f"big-{n}"))
    client = client_for(store)
    counter = redis.Redis.from_url(redis_url)
    counter.config_resetstat()
    result = rpc(client, "ListTasks", {"pageSize": 1}, version="1.0")["result"]
    assert len(result["tasks"]) == 1 and result["totalSize"] == 60
    stats = counter.info("commandstats")
    reads = stats.get("cmdstat_hmget", {}).get("calls", 0) + stats.get("cmdstat_get", {}).get(
        "calls", 0
    )
    assert reads <= 4, stats  # the one task shown; not the 60 stored (6 MB)


def test_expired_tasks_leave_the_redis_indexes(redis_url: str) -> None:
    store = redis_store(redis_url, terminal_ttl=1)
    done, running = fill(store, 2)
    for task_id in (done, running):
        transition(store, task_id, to_state("working"))
    transition(store, done, to_state("completed"))
    client = client_for(store)
    assert rpc(client, "ListTasks", {}, version="1.0")["result"]["totalSize"] == 2
    wait_for(lambda: store.get(done) is None, timeout=30, what="Redis to expire the task")
    time.sleep(0.01)
    assert store.purge_expired() == 1  # what the reaper does on each run
    result = rpc(client, "ListTasks", {}, version="1.0")["result"]
    assert [task["id"] for task in result["tasks"]] == [running]
    assert result["totalSize"] == 1


def test_a_status_is_indexed_by_the_time_it_is_saved_with() -> None:
    """What a store indexes a saved status by is the time it carries: its own
    when later than the listing's moment, else the one it is restamped with."""
    status = {"state": "working", "timestamp": "2026-01-02T03:04:05.000006Z"}
    own = epoch(status["timestamp"])
    assert stamp_after(status, own - 1.0) == (status, own)
    restamped, seconds = stamp_after(status, own)
    assert restamped is not status and seconds > own
    assert seconds == epoch(restamped["timestamp"])
    assert stamp_after({"state": "working"}, own) == ({"state": "working"}, 0.0)


def test_totals_equal_a_scans_with_tasks_moved_and_expired(store_kind: str, stores: Stores) -> None:
    """Each filter's total (owner, context, state) as a scan of every task
    counts it, with tasks in several states and contexts, some changed
    after the listing's moment, one finished and expired but not yet
    purged, and after the purge."""
    now = [time.time()]
    store = stores.open(store_kind, clock=lambda: now[0], terminal_ttl=30)
    ids = fill(store, 4, "alice", "ctx-a") + fill(store, 3, "alice", "ctx-b")
    ids += fill(store, 2, "bob")
    for task_id in ids[:5]:
        assert transition(store, task_id, to_state("working")).applied
    assert transition(store, ids[2], to_state("canceled")).applied
    assert transition(store, ids[4], to_state("input-required")).applied
    now[0] += 40  # the canceled task has expired; nothing has purged it yet
    as_of = time.time()
    time.sleep(0.01)
    assert transition(store, ids[0], to_state("completed")).applied  # after the moment

    def check() -> None:
        tasks = list(store.all().values())
        for owner in ("alice", "bob", "nobody"):
            for context in (None, "ctx-a", "ctx-b"):
                for state in (None, "working", "submitted", "completed", "canceled"):
                    query = Query(owner, context, state, None, 2, as_of, None)
                    scan = list_by_scan(tasks, lambda i: _history(store, i), query)
                    assert store.listing(query).total == scan.total, query

    check()
    store.purge_expired()
    check()


def _history(store: Any, task_id: str) -> list[tuple[float, str]]:
    """The status history the task's event log records."""
    return [
        (epoch(event["status"].get("timestamp", "")), event["status"]["state"])
        for _, event in store.events(task_id, 0)
        if event["kind"] == "status-update"
    ]
