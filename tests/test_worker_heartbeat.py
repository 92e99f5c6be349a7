"""Heartbeats: one thread per process beats for every task running in it."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter
from typing import Any

from shared.errors import StoreError
from shared.memory_store import MemoryStore
from tests.support.polling import wait_for
from worker.heartbeat import heartbeating


class BeatCounter(MemoryStore):
    """Counts beats per task; beats for "broken" fail as a store outage would."""

    def __init__(self) -> None:
        super().__init__()
        self.beats: Counter[str] = Counter()
        self.calls: list[tuple[str, ...]] = []
        self._counting = threading.Lock()

    def heartbeat(self, *task_ids: str) -> None:
        with self._counting:
            self.calls.append(task_ids)
            self.beats.update(task_ids)
        if "broken" in task_ids:
            raise StoreError("store unavailable")


def test_tasks_due_together_are_beaten_in_one_call_per_store() -> None:
    store, other = BeatCounter(), BeatCounter()
    ids = [f"together-{n}" for n in range(200)]
    blocks = [heartbeating(store, task_id, 0.2) for task_id in ids]
    blocks.append(heartbeating(other, "elsewhere", 0.2))
    for block in blocks:
        block.__enter__()
    try:
        wait_for(lambda: all(store.beats[i] >= 2 for i in ids), timeout=10, what="beats")
        # Registered within a few milliseconds, they fall due together: a
        # burst of 200 calls would be 200 round trips on a real store.
        assert len(store.calls) < len(ids)
        assert max(len(call) for call in store.calls) > 1
        assert other.beats["elsewhere"] >= 1 and all(c == ("elsewhere",) for c in other.calls)
    finally:
        for block in blocks:
            block.__exit__(None, None, None)


def beat_threads() -> int:
    return sum(1 for thread in threading.enumerate() if thread.name == "heartbeats")


def test_many_running_tasks_share_one_thread_and_each_beats() -> None:
    store = BeatCounter()
    ids = [f"task-{n}" for n in range(50)]
    with heartbeating(store, "broken", 0.02):  # its failures stop no one else's beats
        entered = [heartbeating(store, task_id, 0.02) for task_id in ids]
        for block in entered:
            block.__enter__()
        wait_for(lambda: all(store.beats[i] >= 3 for i in ids), timeout=10, what="beats")
        assert beat_threads() == 1
        for block in entered[:25]:
            block.__exit__(None, None, None)
        running = ids[25]

        def beats_more(count: int) -> None:
            target = store.beats[running] + count
            wait_for(lambda: store.beats[running] >= target, timeout=10, what="beats")

        beats_more(2)  # a beat already under way when they ended has landed by now
        ended = {task_id: store.beats[task_id] for task_id in ids[:25]}
        beats_more(3)
        assert {task_id: store.beats[task_id] for task_id in ids[:25]} == ended  # stopped
        for block in entered[25:]:
            block.__exit__(None, None, None)
    assert store.beats["broken"] >= 3


def test_a_task_shorter_than_the_interval_never_beats() -> None:
    store = BeatCounter()
    with heartbeating(store, "quick", 60):
        pass
    assert store.beats["quick"] == 0


def _beats_in_a_child(queue: Any) -> None:
    store = BeatCounter()
    with heartbeating(store, "child-task", 0.02):
        wait_for(lambda: store.beats["child-task"] >= 3, timeout=10, what="beats")
    queue.put(store.beats["child-task"])


def test_a_forked_process_beats_with_its_own_thread() -> None:
    store = BeatCounter()
    with heartbeating(store, "parent-task", 0.02):  # the parent's thread is running
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=_beats_in_a_child, args=(queue,))
        child.start()
        assert queue.get(timeout=20) >= 3
        child.join(10)
        assert child.exitcode == 0
