"""Delivery in-process against a real receiver: the metrics it counts, the
failure Flower shows for a give-up, and the SSRF rules' address checks."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import REGISTRY

from shared import Settings
from shared.events import artifact_update, status_update
from shared.push.contract import Cursor, PushStore
from shared.push.http import Allowed
from shared.store.contract import Commit
from shared.stores.memory.store import MemoryStore
from shared.task import COMPLETED, WORKING, Artifact, new_task
from tests.support.polling import wait_for
from tests.support.shortcuts import push_store
from tests.support.webhook_receiver import Receiver
from worker.push.delivery import GaveUp, Policy, deliver, sweep
from worker.push.metrics import push_metrics

SETTINGS = Settings(push_allowed_hosts=("127.0.0.1",), push_linger=0.5, push_backoff=0.01)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver().start()
    yield receiver
    receiver.stop()


def a_task(store: MemoryStore, receiver: Receiver, path: str, *, started: bool = True) -> str:
    message = {
        "kind": "message",
        "role": "user",
        "messageId": "m",
        "parts": [{"kind": "text", "text": "x"}],
    }
    task = new_task(message, None, None)  # type: ignore[arg-type]
    store.create(task)
    if started:
        store.commit(Commit(task, [status_update(task, WORKING)], 1, snapshot=False))
    push = push_store(store)
    assert push is not None
    push.put({"id": "c", "taskId": task["id"], "url": receiver.url(path), "version": "1.0"}, 10)
    return task["id"]


def counted() -> tuple[float, ...]:
    push_metrics()  # made on first use

    def sample(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    return (
        sample("toolnexus_push_deliveries_total"),
        sample("toolnexus_push_retries_total"),
        sample("toolnexus_push_given_up_total", reason="rejected"),
        sample("toolnexus_push_post_duration_seconds_sum"),
    )


def test_deliveries_retries_and_give_ups_are_counted(receiver: Receiver) -> None:
    store = MemoryStore()
    push = push_store(store)
    assert push is not None
    policy = Policy.of(SETTINGS)
    before = counted()

    receiver.script("/flaky", (500, {}))
    flaky = a_task(store, receiver, "/flaky")
    assert deliver(store, push, flaky, "c", "me", policy) == "retrying"
    assert push.cursor(flaky, "c").failures == 1
    assert deliver(store, push, flaky, "c", "me", policy) == "delivered"
    assert push.cursor(flaky, "c").delivered == 2

    receiver.script("/gone", (404, {}), (404, {}))
    gone = a_task(store, receiver, "/gone")
    with pytest.raises(GaveUp):  # the Celery task fails: Flower shows it so
        deliver(store, push, gone, "c", "me", policy)
    assert push.cursor(gone, "c").given_up == 2

    delivered, retries, rejected, seconds = (a - b for a, b in zip(counted(), before, strict=True))
    assert (delivered, retries, rejected) == (2, 1, 2)
    assert seconds > 0


def test_a_lease_held_by_another_is_left_alone(receiver: Receiver) -> None:
    store = MemoryStore()
    push = push_store(store)
    assert push is not None
    task_id = a_task(store, receiver, "/leased")
    assert push.lease(task_id, "c", "another", 30)  # a delivery running meanwhile
    sent: list[str] = []
    assert sweep(store, push, lambda *message: sent.append(message[2]), 30) == 0
    assert deliver(store, push, task_id, "c", "me", Policy.of(SETTINGS)) == "taken"
    assert sent == [] and receiver.on("/leased") == []


def test_a_delivery_whose_message_waited_past_its_booking_still_delivers(
    receiver: Receiver,
) -> None:
    store = MemoryStore()
    push = push_store(store)
    assert push is not None
    task_id = a_task(store, receiver, "/late")
    queued: list[str] = []  # the push queue: the holders of the messages sent, oldest first

    def send(task: str, config_id: str, holder: str) -> None:
        queued.append(holder)

    booking = 0.05
    assert sweep(store, push, send, booking) == 1
    # No worker runs the message (one starting up, or busy): its booking runs
    # out and a later sweep books the pair again, for a second message.
    wait_for(lambda: sweep(store, push, send, booking), timeout=5, what="a second booking")
    first, second = queued
    policy = Policy.of(SETTINGS)
    # The older message runs first, as a queue hands them out. It delivers:
    # were it to give way to the later booking ("taken"), so would each
    # message after it while the queue's wait outlasted a booking.
    assert deliver(store, push, task_id, "c", first, policy) == "delivered"
    assert [hit.event_id for hit in receiver.delivered("/late")] == [1, 2]
    # The later one finds the pair caught up: nothing is sent twice.
    assert deliver(store, push, task_id, "c", second, policy) == "delivered"
    assert len(receiver.on("/late")) == 2


@pytest.mark.parametrize(
    ("host", "address", "allowed"),
    [
        ("example.com", "93.184.215.14", True),
        ("evil.example", "127.0.0.1", True),  # 127.0.0.1 is on the list
        ("evil.example", "127.0.0.2", False),
        ("evil.example", "10.1.2.3", False),
        ("evil.example", "169.254.169.254", False),  # cloud metadata
        ("evil.example", "224.0.0.1", False),
        ("evil.example", "0.0.0.0", False),
        ("evil.example", "::1", False),
        ("evil.example", "::ffff:10.0.0.1", False),  # IPv4-mapped
        ("evil.example", "fe80::1", False),
        ("evil.example", "fd00::1", False),
        ("hooks.internal", "10.9.9.9", True),  # named on the list
        ("evil.example", "192.168.7.7", True),  # in a listed network
    ],
)
def test_the_ssrf_rules(host: str, address: str, allowed: bool) -> None:
    rules = Allowed.parse(["127.0.0.1", "hooks.internal", "192.168.7.0/24"])
    assert rules.permits(host, ipaddress.ip_address(address)) is allowed


def test_events_trimmed_before_delivery_arrive_as_the_task(receiver: Receiver) -> None:
    store = MemoryStore(log_limit=3)
    push = push_store(store)
    assert push is not None
    task_id = a_task(store, receiver, "/trimmed")
    for n in range(4):  # six events in all; the log keeps the last three
        record = store.read(task_id)
        assert record is not None
        event = artifact_update(
            record.task, {"artifactId": "a", "parts": [{"kind": "text", "text": f"{n}"}]}
        )
        assert store.commit(Commit(record.task, [event], record.seq, snapshot=False))
    deliver(store, push, task_id, "c", "me", Policy.of(SETTINGS))
    hits = receiver.delivered("/trimmed")
    # Never a silent gap: the task as it stands, numbered as its latest event.
    assert [(hit.event_id, list(hit.body)) for hit in hits] == [(6, ["task"])]
    assert hits[0].body["task"]["id"] == task_id
    assert [a["parts"][0]["text"] for a in hits[0].body["task"]["artifacts"]] == ["3"]


def test_a_delivery_follows_a_running_task_but_not_a_queued_one(receiver: Receiver) -> None:
    """A delivery holds a worker slot: lingering on tasks that wait in the
    queue could take every slot from the fulfilment that would start them."""
    store = MemoryStore()
    push = push_store(store)
    assert push is not None
    policy = replace(Policy.of(SETTINGS), linger=60.0)

    queued = a_task(store, receiver, "/queued", started=False)
    delivery = threading.Thread(target=deliver, args=(store, push, queued, "c", "me", policy))
    delivery.start()
    delivery.join(10)  # far short of the linger: it did not wait for the task to start
    assert not delivery.is_alive()
    assert [hit.event_id for hit in receiver.delivered("/queued")] == [1]

    running = a_task(store, receiver, "/running")
    outcome: list[str] = []
    delivery = threading.Thread(
        target=lambda: outcome.append(deliver(store, push, running, "c", "me", policy))
    )
    delivery.start()
    wait_for(lambda: len(receiver.delivered("/running")) == 2, timeout=10, what="the events so far")
    record = store.read(running)
    assert record is not None
    assert store.commit(
        Commit(record.task, [status_update(record.task, COMPLETED)], record.seq, snapshot=False)
    )
    delivery.join(10)  # the same delivery, still following, sent the end and stopped
    assert outcome == ["delivered"]
    assert [hit.event_id for hit in receiver.delivered("/running")] == [1, 2, 3]


class CountedCursors:
    """A push store that counts its cursor writes (everything else passes through)."""

    def __init__(self, push: PushStore) -> None:
        self.push, self.writes = push, 0

    def set_cursor(self, task_id: str, config_id: str, cursor: Cursor) -> None:
        self.writes += 1
        self.push.set_cursor(task_id, config_id, cursor)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.push, name)


@pytest.mark.parametrize(
    ("every", "writes_ok"),
    [(3600.0, lambda writes: 1 <= writes <= 2), (0.0, lambda writes: writes == 201)],
)
def test_a_fast_feed_stores_its_cursor_at_most_every_cursor_every_seconds(
    receiver: Receiver, every: float, writes_ok: Callable[[int], bool]
) -> None:
    store = MemoryStore()
    task_id = a_task(store, receiver, f"/batched-{every}")
    for n in range(199):  # 201 events in all
        record = store.read(task_id)
        assert record is not None
        chunk: Artifact = {"artifactId": "a", "parts": [{"kind": "text", "text": f"{n}"}]}
        event = artifact_update(record.task, chunk, append=n > 0)
        assert store.commit(Commit(record.task, [event], record.seq, snapshot=False))
    push = push_store(store)
    assert push is not None
    counted_push = CountedCursors(push)
    policy = replace(Policy.of(SETTINGS), cursor_every=every)
    assert deliver(store, counted_push, task_id, "c", "me", policy) == "delivered"
    # Every event arrived once, in order, and the stored cursor names the last.
    assert [hit.event_id for hit in receiver.on(f"/batched-{every}")] == list(range(1, 202))
    assert push.cursor(task_id, "c") == Cursor(delivered=201)
    # A write per event when asked; else only when it goes quiet (and at the end).
    assert writes_ok(counted_push.writes)
