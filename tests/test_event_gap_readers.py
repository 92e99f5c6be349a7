"""The gap count names its reader: a live stream and a blocking send that
fall behind a trim of the log each get the task as it stands in place of the
events it lost, and `toolnexus_event_gaps_total` rises by one for that reader
(`stream`, `wait`), over real HTTP with an in-process worker.

The store is a memory store that keeps a short log. A reader falls behind
because its reads of the log are paused (`PausedReads`) while the agent writes
far past what the log keeps, so each test has exactly one gap."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from shared import Settings
from shared.events import Event
from shared.stores.memory.store import MemoryStore, memory_store
from tests.support.a2a import call
from tests.support.agents import gate
from tests.support.polling import wait_for
from tests.support.sse import Stream, results
from tests.test_web_streaming import kinds, user
from tests.test_web_support import live_server
from web import create_app
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher

KEPT = 7  # the events the store keeps of a task's log
BURST = 30  # chunks written while the reader is paused: far past what is kept
READERS = ("stream", "resume", "wait", "push")
# Events before the burst: submitted, the claim, the progress message.
BEFORE = 3


class PausedReads:
    """The store's log reads, as the follower makes them (a page at a time),
    paused while `pausing` is set: the reader stands still, as one that fell
    behind does, until the test lets it go (`released`). Other reads of the
    log (all of it, no limit) pass."""

    def __init__(self, store: MemoryStore) -> None:
        self.read = store.events  # the store's own, never paused
        self.pausing = threading.Event()
        self.paused = threading.Event()  # a follower's read is waiting
        self.released = threading.Event()
        self.newest = 0  # the newest event a follower's read has returned

    def events(self, task_id: str, after: int, limit: int | None = None) -> list[tuple[int, Event]]:
        if limit is not None and self.pausing.is_set():
            self.paused.set()
            assert self.released.wait(10), "the test never let the reader go"
        page = self.read(task_id, after, limit)
        if limit is not None and page:
            self.newest = max(self.newest, page[-1][0])
        return page


Served = tuple[str, MemoryStore, PausedReads]
GATES: set[str] = set()  # every gate a test made, opened at the end whatever happened


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """The app served with the burst agent over a memory store that keeps
    only the newest KEPT events of a task, its follower reads paused at will."""
    store = memory_store(log_limit=KEPT)
    reads = PausedReads(store)
    monkeypatch.setattr(store, "events", reads.events)
    config = Settings(run="tests.support.burst_agent:burst")
    dispatcher = InProcessDispatcher(store, load_agent(config), config, threads=4)
    try:
        with live_server(create_app(config, store=store, dispatcher=dispatcher)) as (url, _):
            yield url, store, reads
    finally:
        reads.released.set()
        for name in list(GATES):
            gate(name)[1].set()
        dispatcher.close(timeout=5)


def gates() -> tuple[str, str, str]:
    """A fresh gate name for the agent's text, and its two gates."""
    name = f"gap-{uuid.uuid4().hex[:8]}"
    GATES.update({f"{name}-burst", f"{name}-after"})
    return name, f"{name}-burst", f"{name}-after"


def gaps() -> dict[str, float]:
    """`toolnexus_event_gaps_total` of every reader."""
    return {
        reader: REGISTRY.get_sample_value("toolnexus_event_gaps_total", {"reader": reader}) or 0.0
        for reader in READERS
    }


def risen(before: dict[str, float], reader: str) -> dict[str, float]:
    """What the counts should be now: `reader`'s one higher, the rest as they were."""
    return {**before, reader: before[reader] + 1}


def burst_behind(store: MemoryStore, reads: PausedReads, burst: str, after: str) -> str:
    """With the agent at its burst gate and the reader up to event BEFORE:
    pause the reader, let the agent write its burst, wait until the reader's
    next read waits and the agent stands at its after gate, check the log was
    trimmed past the reader, then let the reader go. The task's id."""
    reads.pausing.set()
    gate(burst)[1].set()
    assert gate(after)[0].wait(10), "the agent never finished its burst"
    wait_for(reads.paused.is_set, what="the reader's next read")
    (task_id,) = store.all()
    kept = [seq for seq, _ in reads.read(task_id, 0)]
    assert kept == list(range(BEFORE + BURST - KEPT + 1, BEFORE + BURST + 1))
    reads.pausing.clear()
    reads.released.set()
    return task_id


def test_a_stream_behind_the_trim_gets_the_task_and_counts_a_stream_gap(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    url, store, reads = served
    name, burst, after = gates()
    before = gaps()
    caplog.set_level(logging.INFO, logger="shared.store.follow")
    stream = Stream(url, "SendStreamingMessage", {"message": user(f"{name} {BURST}")})
    events = iter(stream)
    # The Task, the claim and the progress message: the stream is live.
    shown = [next(events) for _ in range(BEFORE)]
    assert [event.id for event in shown] == [1, 2, 3]
    assert gate(burst)[0].wait(10)
    assert reads.newest == BEFORE
    task_id = burst_behind(store, reads, burst, after)
    # In place of the trimmed events 4 to 26: the task as it stands, at event 33.
    caught_up = next(events)
    assert caught_up.id == BEFORE + BURST
    assert kinds(results([caught_up])) == ["task TASK_STATE_WORKING"]
    (artifact,) = caught_up.data["result"]["task"]["artifacts"]
    assert len(artifact["parts"]) == BURST
    assert gaps() == risen(before, "stream")
    (logged,) = [r.getMessage() for r in caplog.records if "asked for events" in r.getMessage()]
    assert logged.startswith(f"task {task_id}: stream asked for events after {BEFORE};")
    # Then what follows, by one from there, to the end.
    gate(after)[1].set()
    rest = list(events)
    assert [event.id for event in rest] == list(
        range(BEFORE + BURST + 1, BEFORE + BURST + 1 + len(rest))
    )
    assert kinds(results(rest))[-1] == "statusUpdate TASK_STATE_COMPLETED"
    assert gaps() == risen(before, "stream")


def test_a_blocking_send_behind_the_trim_gets_the_task_and_counts_a_wait_gap(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    url, store, reads = served
    name, burst, after = gates()
    before = gaps()
    caplog.set_level(logging.INFO, logger="shared.store.follow")
    message = {
        "role": "user",
        "messageId": str(uuid.uuid4()),
        "parts": [{"kind": "text", "text": f"{name} {BURST}"}],
    }
    replies: list[dict[str, Any]] = []
    sending = threading.Thread(
        target=lambda: replies.append(
            call(
                url,
                "message/send",
                {"message": message, "configuration": {"blocking": True}},
                timeout=30,
            )
        )
    )
    sending.start()
    try:
        # The send waits; its follower has read up to the progress message.
        assert gate(burst)[0].wait(10)
        wait_for(lambda: reads.newest == BEFORE, what="the waiting send to read event 3")
        task_id = burst_behind(store, reads, burst, after)
        # The follower takes the task as it stands in place of events 4 to 26.
        wait_for(lambda: gaps() != before, what="the gap to be counted")
        assert gaps() == risen(before, "wait")
        (logged,) = [r.getMessage() for r in caplog.records if "asked for events" in r.getMessage()]
        assert logged == (
            f"task {task_id}: wait asked for events after {BEFORE}; the log holds"
            f" {BEFORE + BURST - KEPT + 1} next: sending the task as it stands"
            f" (event {BEFORE + BURST}) instead"
        )
        assert not replies, "the send answered before its task ended"
    finally:
        gate(after)[1].set()
        sending.join(30)
    # ...and answers with the finished task, every chunk in it.
    (reply,) = replies
    task = reply["result"]
    assert task["status"]["state"] == "completed"
    chunks = {artifact.get("name"): len(artifact["parts"]) for artifact in task["artifacts"]}
    assert chunks["burst"] == BURST
    assert gaps() == risen(before, "wait")
