"""Heartbeats: one thread per process beats for every task running in it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from shared.errors import StoreError
from shared.stores.memory.store import MemoryStore
from tests.support.polling import wait_for
from worker.engine.heartbeat import heartbeating


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


class BlockingStore(BeatCounter):
    """Its beats block until `release` is set: while one is under way the
    process's beat thread can do nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.inside = threading.Event()
        self.release = threading.Event()

    def heartbeat(self, *task_ids: str) -> None:
        super().heartbeat(*task_ids)
        self.inside.set()
        self.release.wait(60)


def test_tasks_due_together_are_beaten_in_one_call_per_store() -> None:
    # The beat thread is stuck inside another store's beat while 200 tasks
    # register and all fall due; released, it finds them due together
    # whatever the scheduler did meanwhile (registering 200 used to race it).
    blocking, store, other = BlockingStore(), BeatCounter(), BeatCounter()
    ids = [f"together-{n}" for n in range(200)]
    every = 0.2
    blocks = [heartbeating(store, task_id, every) for task_id in ids]
    blocks.append(heartbeating(other, "elsewhere", every))
    with heartbeating(blocking, "blocker", 0.01):
        assert blocking.inside.wait(30), "the beat thread never beat"
        try:
            for block in blocks:
                block.__enter__()
            all_due = time.monotonic() + every
            wait_for(lambda: time.monotonic() > all_due, what="every registered task to fall due")
        finally:
            blocking.release.set()
        try:
            wait_for(lambda: all(store.beats[i] >= 2 for i in ids), timeout=30, what="beats")
            # One call for all 200, not 200 round trips on a real store; the
            # other store's task in a call of its own.
            assert sorted(store.calls[0]) == sorted(ids)
            assert other.calls[0] == ("elsewhere",)
            assert all(c == ("elsewhere",) for c in other.calls)
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


def test_tasks_started_apart_fall_into_step() -> None:
    """Tasks started one after another, spread over a whole interval, are
    soon beaten together: a few store calls an interval for all of them, not
    one each (a process running thousands of I/O calls would otherwise wake
    and call the store for each)."""
    store = BeatCounter()
    ids = [f"spread-{n}" for n in range(40)]
    blocks = [heartbeating(store, task_id, 0.2) for task_id in ids]
    started = threading.Event()
    for block in blocks:
        block.__enter__()
        started.wait(0.005)  # spread the starts over about one interval
    try:
        wait_for(lambda: all(store.beats[i] >= 6 for i in ids), timeout=30, what="beats")
        with store._counting:
            later = store.calls[len(ids) :]  # past the first round's scattered beats
        beaten = sum(len(call) for call in later)
        assert len(later) * 4 <= beaten, (len(later), beaten)
    finally:
        for block in blocks:
            block.__exit__(None, None, None)


def test_a_task_shorter_than_the_interval_never_beats() -> None:
    store = BeatCounter()
    with heartbeating(store, "quick", 60):
        pass
    assert store.beats["quick"] == 0


# Forks in a fresh interpreter whose only other thread is the heartbeat
# thread (as in a Celery worker's main process). Forked from pytest's own
# process instead, the child once hung for 100 s before doing anything: a
# pytest-xdist worker has threads of its own (execnet's) whose locks a fork
# can copy held. faulthandler prints every thread's stack should either hang.
_FORK_SCRIPT = """
import faulthandler, os, sys, traceback
faulthandler.dump_traceback_later(90, exit=True)
from tests.support.polling import wait_for
from tests.test_worker_heartbeat import BeatCounter
from worker.engine.heartbeat import heartbeating

parent = BeatCounter()
with heartbeating(parent, "parent-task", 0.02):
    wait_for(lambda: parent.beats["parent-task"] >= 1, timeout=60, what="the parent's beat")
    pid = os.fork()
    if pid == 0:
        try:
            before = parent.beats["parent-task"]
            child = BeatCounter()
            with heartbeating(child, "child-task", 0.02):
                wait_for(lambda: child.beats["child-task"] >= 3, timeout=60, what="its beats")
            # The parent's thread did not come along: its task is not beaten here.
            assert parent.beats["parent-task"] == before, "the parent's task beaten in the child"
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_process_beats_with_its_own_thread() -> None:
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", _FORK_SCRIPT],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert done.returncode == 0, done.stderr


FIRST_TASKS = """
import sys, threading
from shared.stores.memory.store import MemoryStore
from worker.engine.heartbeat import _Beats

class Beaten(MemoryStore):
    def __init__(self):
        super().__init__()
        self.beaten = threading.Event()

    def heartbeat(self, *task_ids):
        self.beaten.set()

for round_number in range(200):
    store = Beaten()
    _Beats().add(store, "first", 0.01)  # its thread starts looking now
    if not store.beaten.wait(10):
        sys.exit(f"no beat for the first task in round {round_number}")
print("beaten")
"""


def test_a_task_added_as_the_beat_thread_starts_still_beats() -> None:
    """The first task of a process is added while the beat thread makes its
    first look: whichever comes first, its beat comes. Many fresh threads,
    each given its task at once, in a process of their own (each thread
    lives as long as its process)."""
    done = subprocess.run(
        [sys.executable, "-c", FIRST_TASKS],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "beaten", done.stderr[-2000:]
