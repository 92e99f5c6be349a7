"""A file-store task that finishes is never read as gone, nor purged, while
its expiry marker is written: the reaper's sweep and the readers run beside
the workers' writes, and a writer can be preempted between any two steps."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from shared.events import to_state
from shared.stores.file.store import file_store
from shared.task import COMPLETED, WORKING, new_task, text_message
from shared.transitions import transition


def test_a_finishing_task_is_never_expired_while_its_marker_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = file_store(tmp_path, terminal_ttl=3600)
    ids = [store.create(new_task(text_message("user", f"t{n}"))).task["id"] for n in range(12)]
    for task_id in ids:
        transition(store, task_id, to_state(WORKING))

    real_utime = os.utime

    def preempted_utime(path: Any, *args: Any, **kwargs: Any) -> None:
        if ".expires" in str(path):
            time.sleep(0.05)  # the writer loses the CPU between two steps of its write
        real_utime(path, *args, **kwargs)

    monkeypatch.setattr(os, "utime", preempted_utime)
    stop = threading.Event()
    purged: list[int] = []
    gone: list[str] = []

    def sweep() -> None:
        while not stop.is_set():
            purged.append(store.purge_expired())

    def read() -> None:
        while not stop.is_set():
            gone.extend(task_id for task_id in ids if store.get(task_id) is None)

    helpers = [threading.Thread(target=sweep), threading.Thread(target=read)]
    for helper in helpers:
        helper.start()
    try:
        for task_id in ids:
            assert transition(store, task_id, to_state(COMPLETED)).applied
    finally:
        stop.set()
        for helper in helpers:
            helper.join(30)
    assert len(purged) > 1 and sum(purged) == 0  # the sweep ran throughout, and purged nothing
    assert gone == []
    assert all(store.get(task_id) is not None for task_id in ids)


def test_time_indexes_a_killed_writer_left_behind_its_log_are_put_right(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claim logged by a worker killed before it placed the task in the
    time indexes: the task is working by its log and waiting by its index.
    It is not re-sent for ever: the reaper's scan places it as working, and
    finds it stale as it finds any task whose worker died."""
    now = [1_000.0]
    store = file_store(tmp_path, clock=lambda: now[0])
    task_id = store.create(new_task(text_message("user", "hi"))).task["id"]

    def killed(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt  # the process dies between its log write and its indexes

    monkeypatch.setattr(store, "_indexed", killed)
    with pytest.raises(KeyboardInterrupt):
        transition(store, task_id, to_state(WORKING))
    monkeypatch.undo()
    assert store.indexes.score("waiting", task_id) is not None  # the state before

    now[0] += 100
    assert store.waiting(now[0]) == []  # working by its log: not sent again
    assert store.indexes.score("waiting", task_id) is None
    assert store.stale(now[0] - 50) == []  # marked working just now
    now[0] += 100
    assert store.stale(now[0]) == [task_id]  # no heartbeat since: the reaper fails it


def test_time_index_markers_of_an_earlier_version_are_taken_over(tmp_path: Path) -> None:
    """A directory whose time indexes were marker files (`.working/<id>` and
    the like, scored by their mtime): they read back as the same indexes,
    with the same scores, and the folders go."""
    for folder, task_id, when in (
        (".working", "t-working", 1_000.0),
        (".waiting", "t-waiting", 2_000.0),
        (".interrupted", "t-interrupted", 3_000.0),
    ):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / task_id).touch()
        os.utime(tmp_path / folder / task_id, (when, when))
    store = file_store(tmp_path)
    assert store.indexes.range("working") == [("t-working", 1_000.0)]
    assert store.indexes.range("waiting") == [("t-waiting", 2_000.0)]
    assert store.indexes.range("interrupted") == [("t-interrupted", 3_000.0)]
    assert not any((tmp_path / folder).exists() for folder in (".working", ".waiting"))
    assert not (tmp_path / ".interrupted").exists()
