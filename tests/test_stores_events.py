"""The event-store contract, one suite over every built-in store: tasks as an
ordered log of events appended atomically with each change, idempotent
creation by message key, context ownership, live watches across processes
and finished tasks forgotten after their time to live."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.errors import ContextTaken
from shared.events import artifact_update, state_after, status_update, to_state
from shared.store.contract import Commit, message_key
from shared.store.resolve import resolve_store
from shared.store.wiring import is_full_store
from shared.stores.file.store import file_store
from shared.stores.redis.store import redis_store
from shared.task import (
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    SUBMITTED,
    WORKING,
    new_task,
    state_of,
    text_message,
)
from shared.transitions import SNAPSHOT_EVERY, claim, transition
from tests.support.polling import wait_for
from tests.support.store_kinds import KINDS, SHARED, Stores

SCRIPT_COMMANDS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_evalsha_ro")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(store_kind: str, stores: Stores) -> Any:
    return stores.open(store_kind)


def a_task(owner: str | None = None, context: str | None = None, text: str = "hi") -> Any:
    return new_task(text_message("user", text), context, owner)


def chunk(task: Any, text: str, append: bool = True) -> Any:
    artifact = {"artifactId": "a-1", "parts": [{"kind": "text", "text": text}]}
    return artifact_update(task, artifact, append=append, last_chunk=False)  # type: ignore[arg-type]


def test_every_built_in_store_has_the_whole_contract(store: Any) -> None:
    assert is_full_store(store)


def test_creation_is_event_one_and_each_change_appends_in_order(store: Any) -> None:
    created = store.create(a_task())
    assert created.created
    task_id = created.task["id"]
    record = store.read(task_id)
    assert (record.seq, record.tail) == (1, 0)
    transition(store, task_id, to_state(WORKING))
    transition(store, task_id, lambda t: [chunk(t, "a", append=False), chunk(t, "b")])
    transition(store, task_id, to_state(COMPLETED))
    logged = store.events(task_id, 0)
    assert [seq for seq, _ in logged] == [1, 2, 3, 4, 5]
    assert [e["kind"] for _, e in logged] == [
        "status-update",
        "status-update",
        "artifact-update",
        "artifact-update",
        "status-update",
    ]
    assert [seq for seq, _ in store.events(task_id, 3)] == [4, 5]
    assert store.events(task_id, 5) == []
    assert store.get(task_id)["artifacts"][0]["parts"] == [
        {"kind": "text", "text": "a"},
        {"kind": "text", "text": "b"},
    ]


def test_a_commit_after_an_event_the_writer_did_not_see_is_refused(store: Any) -> None:
    task = store.create(a_task()).task
    stale = store.read(task["id"])
    assert transition(store, task["id"], to_state(WORKING)).applied
    late = Commit(task, [status_update(task, "canceled")], stale.seq, snapshot=False)
    assert not store.commit(late)
    assert state_of(store.get(task["id"])) == WORKING
    assert len(store.events(task["id"], 0)) == 2  # no event for the write that lost


def test_a_claim_moves_a_submitted_task_once_and_logs_its_event(store: Any) -> None:
    # One step on a store that can (Redis), the read-and-commit elsewhere: the same outcome.
    task = store.create(a_task(context="ctx-claimed")).task
    first = claim(store, task["id"], to=WORKING, from_state=SUBMITTED)
    assert first.applied and first.record is not None
    assert (state_of(first.record.task), first.record.seq) == (WORKING, 2)
    assert first.record.task["history"] == task["history"]
    assert first.record.task == store.read(task["id"]).task
    ((_, event),) = store.events(task["id"], 1)
    assert event == {
        "kind": "status-update",
        "taskId": task["id"],
        "contextId": "ctx-claimed",
        "status": first.record.task["status"],
        "final": False,
        "generation": 2,
    }
    assert first.record.task["generation"] == 2
    again = claim(store, task["id"], to=WORKING, from_state=SUBMITTED)
    assert not again.applied  # a duplicate delivery finds it working
    assert again.record is not None and again.record.seq == 2
    assert claim(store, "no-such-task", to=WORKING, from_state=SUBMITTED).record is None
    assert state_of(store.get(task["id"])) == WORKING
    assert store.stale(time.time() + 60) == [task["id"]]


def test_redis_claims_in_one_script_and_old_tasks_the_long_way(redis_url: str) -> None:
    store = redis_store(redis_url)
    client = redis.Redis.from_url(redis_url)
    assert is_full_store(store)
    fresh, old = (store.create(a_task()).task["id"] for _ in range(2))
    # A task saved before contexts were recorded for claims: the store declines.
    client.hdel(f"toolnexus:task:{old}", "cj")
    event = status_update(store.get(old), WORKING)
    assert store.claim(old, SUBMITTED, event) is None
    assert claim(store, old, to=WORKING, from_state=SUBMITTED).applied

    sent: list[str] = []
    execute = store.client.execute_command

    def counted(*args: Any, **options: Any) -> Any:
        sent.append(str(args[0]))
        return execute(*args, **options)

    store.client.execute_command = counted  # type: ignore[method-assign]
    assert claim(store, fresh, to=WORKING, from_state=SUBMITTED).applied
    assert sent == ["EVALSHA"]  # one round trip: no read before it
    store.client.execute_command = execute  # type: ignore[method-assign]
    # A wrong key type is unreadable data: not claimed, nothing raised.
    client.set("toolnexus:task:broken", "not a hash")
    assert claim(store, "broken", to=WORKING, from_state=SUBMITTED).record is None


def test_a_claim_to_a_state_at_rest_or_a_forbidden_one_takes_the_long_way(store: Any) -> None:
    task_id = store.create(a_task()).task["id"]
    # To a state at rest: written whole (what only `transition` does), on every store.
    assert claim(store, task_id, to=FAILED, from_state=SUBMITTED).applied
    assert store.read(task_id).tail == 0
    # A move the state machine forbids is refused, never written in one step.
    refused = claim(store, task_id, to=WORKING, from_state=FAILED)
    assert not refused.applied
    assert state_of(store.get(task_id)) == FAILED
    assert len(store.events(task_id, 0)) == 2


def test_a_read_folds_the_tail_the_same_as_a_snapshot(store: Any) -> None:
    task_id = store.create(a_task()).task["id"]
    transition(store, task_id, to_state(WORKING))
    texts = [f"{n} " for n in range(SNAPSHOT_EVERY * 2 + 5)]
    for n, text in enumerate(texts):
        transition(store, task_id, lambda t, text=text, n=n: [chunk(t, text, append=n > 0)])
        record = store.read(task_id)
        assert record.tail < SNAPSHOT_EVERY  # snapshots keep the tail short
        assert [p["text"] for p in record.task["artifacts"][0]["parts"]] == texts[: n + 1]


def test_a_task_that_comes_to_rest_is_written_whole(store: Any) -> None:
    task_id = store.create(a_task()).task["id"]
    transition(store, task_id, to_state(WORKING))
    transition(store, task_id, lambda t: [chunk(t, "partial ", append=False)])
    assert store.read(task_id).tail == 2  # in between, a change writes only its events
    transition(store, task_id, to_state(INPUT_REQUIRED))
    assert store.read(task_id).tail == 0  # waiting for its caller: read, not changed
    for state in (SUBMITTED, WORKING, COMPLETED):  # as a follow-up message does
        assert transition(store, task_id, to_state(state)).applied
    record = store.read(task_id)
    assert (record.tail, record.seq) == (0, 7)
    assert state_of(record.task) == COMPLETED
    assert record.task["artifacts"][0]["parts"][0]["text"] == "partial "


def test_redis_reads_a_task_with_nothing_after_its_snapshot_in_one_command(
    redis_url: str,
) -> None:
    store = redis_store(redis_url)
    client = redis.Redis.from_url(redis_url)
    task_id = store.create(a_task()).task["id"]

    def scripts_run() -> int:
        stats = client.info("commandstats")
        return sum(int(stats.get(name, {}).get("calls", 0)) for name in SCRIPT_COMMANDS)

    before = scripts_run()
    assert state_of(store.read(task_id).task) == "submitted"  # new: its snapshot is all of it
    assert scripts_run() == before
    transition(store, task_id, to_state(WORKING))  # an event after the snapshot
    before = scripts_run()
    record = store.read(task_id)
    assert (state_of(record.task), record.tail) == (WORKING, 1)
    assert scripts_run() == before + 1  # snapshot and tail read together, atomically


def test_a_message_key_creates_one_task(store: Any) -> None:
    key = message_key("alice", "m-1")
    first = store.create(a_task("alice"), key)
    again = store.create(a_task("alice"), key)
    assert first.created and not again.created
    assert again.task["id"] == first.task["id"]
    assert len(store.all()) == 1
    other = store.create(a_task("bob"), message_key("bob", "m-1"))
    assert other.created  # the same message id of another caller is another message


def test_a_context_belongs_to_the_caller_that_used_it_first(store: Any) -> None:
    store.create(a_task("alice", "ctx-1"))
    store.create(a_task("alice", "ctx-1"))  # the owner may add tasks to it
    with pytest.raises(ContextTaken):
        store.create(a_task("mallory", "ctx-1"))
    assert {t.get("owner") for t in store.all().values()} == {"alice"}


def logged_state(store: Any, task_id: str) -> str:
    """The state the task's log says, as a waiter reads it on waking."""
    return state_after((event for _, event in store.events(task_id, 0)), SUBMITTED)


def settle(watch: Any, read: int) -> None:
    """Wait until a wait ends by its timeout with nothing changed: a watch
    whose `wait` always returned True would pass every check that follows
    a wake-up, so first it must be seen to block. `read`: the number of the
    last event the watcher read, as every caller passes it (a listener that
    first connects tells each watched task's newest number: no wake-up for
    a waiter that read that far). A deadline still, for wake-ups without a
    number, which a waiter must allow."""
    wait_for(
        lambda: not watch.wait(0.1, read), timeout=20, what="a wait to time out, nothing changed"
    )


def test_a_watch_wakes_when_the_task_changes(store: Any) -> None:
    task_id = store.create(a_task()).task["id"]
    with store.watch(task_id) as watch:
        read = store.read(task_id).seq  # read after the watch began, as a stream does
        settle(watch, read)
        # Before the change: a store may wake its waiters more than once for
        # one change (the file store: once itself, once from its poller), so
        # after it a stray second wake-up could be mistaken for the hand's.
        watch.wake()
        assert watch.wait(0, read)  # woken by hand, e.g. when the client hung up
        assert not watch.wait(0, read)  # and the hand's wake-up was used up
        threading.Timer(0.05, lambda: transition(store, task_id, to_state(WORKING))).start()
        assert watch.wait(30, read), "no wake-up for the change"
        # The wake-up came with the change, not before it.
        assert logged_state(store, task_id) == WORKING


def test_a_file_watch_sleeps_until_the_log_changes_after_it_began(tmp_path: Path) -> None:
    # Its poller compares each log with the log as the watch found it, so its
    # first look at a quiet log (however late, on a loaded machine) wakes no one.
    store = file_store(tmp_path / "tasks")
    task_id = store.create(a_task()).task["id"]
    with store.watch(task_id) as watch:
        assert not watch.wait(0.3)  # the poller looked a few times meanwhile
        elsewhere = file_store(tmp_path / "tasks")  # as another process: only the poller tells
        transition(elsewhere, task_id, to_state(WORKING))
        assert watch.wait(30), "no wake-up for the change the poller should see"
        assert logged_state(store, task_id) == WORKING


def _commit_later(spec: str, task_id: str, delay: float) -> None:
    time.sleep(delay)
    transition(resolve_store(spec), task_id, to_state(WORKING))


@pytest.mark.parametrize("store_kind", SHARED)
def test_a_watch_wakes_for_a_change_made_by_another_process(
    store_kind: str, stores: Stores
) -> None:
    spec = stores.url(store_kind)
    store = resolve_store(spec)
    task_id = store.create(a_task()).task["id"]
    with store.watch(task_id) as watch:
        read = store.read(task_id).seq
        settle(watch, read)
        child = multiprocessing.get_context("spawn").Process(
            target=_commit_later, args=(spec, task_id, 0.5)
        )
        child.start()
        try:
            assert watch.wait(60, read), "no wake-up for the other process's change"
            # At wake time the other process's change is there to read.
            assert logged_state(store, task_id) == WORKING
        finally:
            child.join(60)
    assert child.exitcode == 0


def test_a_task_past_its_time_gives_up_its_key_and_its_id_before_any_purge(
    store_kind: str, stores: Stores
) -> None:
    if KINDS[store_kind].expires_itself:
        pytest.skip("this store expires a task by its server's clock, not the store's")
    clock = Clock()
    store = stores.open(store_kind, clock=clock, terminal_ttl=60)
    key = message_key("", "m-past")
    done = store.create(a_task(), key).task["id"]
    transition(store, done, to_state(WORKING))
    transition(store, done, to_state(COMPLETED))
    clock.now += 61
    again = store.create(a_task(), key)
    assert again.created and again.task["id"] != done
    fresh = {**a_task(text="afresh"), "id": done}
    store.save(fresh)
    assert store.get(done) == fresh
    assert [event["kind"] for _, event in store.events(done, 0)] == ["status-update"]


def expiring(store_kind: str, stores: Stores) -> tuple[Any, Clock, bool]:
    """A store whose finished tasks expire, its clock, and whether it expires
    them by its server's clock (a TTL of 1 s it reaches while the test
    waits) rather than the test's (60 s, the clock moved on by the test)."""
    clock = Clock()
    by_itself = KINDS[store_kind].expires_itself
    store = stores.open(
        store_kind, clock=None if by_itself else clock, terminal_ttl=1 if by_itself else 60
    )
    return store, clock, by_itself


def test_a_context_is_free_again_once_its_last_task_expired(
    store_kind: str, stores: Stores
) -> None:
    store, clock, by_itself = expiring(store_kind, stores)
    done = store.create(a_task("alice", "ctx-ttl")).task["id"]
    transition(store, done, to_state(WORKING))
    transition(store, done, to_state(COMPLETED))
    with pytest.raises(ContextTaken):  # kept with its task
        store.create(a_task("bob", "ctx-ttl"))
    clock.now += 61
    if not by_itself:
        store.purge_expired()

    def taken_by_bob() -> bool:
        try:
            return store.create(a_task("bob", "ctx-ttl")).created
        except ContextTaken:
            return False

    wait_for(taken_by_bob, timeout=30, what="the context to go with its last task")
    assert store.get(done) is None


def test_finished_tasks_and_their_message_keys_expire(
    store_kind: str, stores: Stores, tmp_path: Path
) -> None:
    store, clock, by_itself = expiring(store_kind, stores)
    key = message_key("", "m-ttl")
    done = store.create(a_task("alice", "ctx-ttl"), key).task["id"]
    alive = store.create(a_task("alice", "ctx-ttl")).task["id"]
    transition(store, done, to_state(WORKING))
    transition(store, done, to_state(COMPLETED))
    transition(store, alive, to_state(WORKING))
    clock.now += 61
    if by_itself:
        wait_for(lambda: store.get(done) is None, timeout=30, what="the store to expire the task")
    else:
        assert store.get(done) is None  # past its time: read as gone at once
        assert store.purge_expired() == 1  # and removed by the reaper's sweep
        assert store.purge_expired() == 0
    assert store.get(alive) is not None  # a task still running never expires
    with pytest.raises(ContextTaken):  # nor does its context's owner
        store.create(a_task("bob", "ctx-ttl"))
    assert store.events(done, 0) == []
    again = store.create(a_task(), key)
    assert again.created and again.task["id"] != done  # the key went with the task
    if store_kind == "file":
        leftovers = [p.name for p in (tmp_path / "tasks").rglob(f"*{done}*")]
        assert leftovers == []
