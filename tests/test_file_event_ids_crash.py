"""File-store event numbers are never reused, even after a power cut.

With TOOLNEXUS_FILE_FSYNC=everysec (or no) a power cut loses the log lines
not yet on the disk: about the last second of them. A power cut is staged
here as it leaves the files: the task's log cut back to what an earlier
moment had (between two lines, or in the middle of one), the files' times
from before the crash, and the store opened again by a machine that booted
after it. A client holding an event id from before the crash then resumes
(the store's follower, and SubscribeToTask with Last-Event-ID over HTTP):
every event written after the restart reaches it, in the Task or as an
event; no number that was handed out before names another event after.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from shared.events import Event, to_state
from shared.stores.file.boot import booted_at
from shared.stores.file.log import EVERYSEC
from shared.stores.file.store import FileStore
from shared.task import COMPLETED, WORKING, new_task, text_message
from shared.transitions import transition
from tests.test_event_ids_crash import check_followed, check_resumed_over_http, chunk

BURST = 120


def power_cut(store: FileStore, task_id: str, keep: int | None) -> float:
    """Leave the task's log as a power cut would: cut to `keep` bytes (None:
    the whole log lost), and last changed before the crash (its task file
    keeps its own time, which its marker names; without a log, it is moved
    back too). Returns when the machine then booted."""
    log = store.directory / ".log" / f"{task_id}.jsonl"
    crashed = time.time() - 60
    if keep is None:
        log.unlink()
        os.utime(store.directory / f"{task_id}.json", (crashed, crashed))
    else:
        with log.open("r+b") as file:
            file.truncate(keep)
        os.utime(log, (crashed, crashed))
    return crashed + 30


def numbered(store: FileStore, task_id: str) -> dict[int, Event]:
    return dict(store.events(task_id, 0))


@pytest.mark.parametrize("cut", ["nothing-lost", "last-lines-lost", "mid-line"])
def test_a_resume_from_before_a_power_cut_never_skips_an_event_written_after_it(
    tmp_path: Path, cut: str
) -> None:
    booted_long_ago = time.time() - 3600
    store = FileStore(tmp_path, fsync=EVERYSEC, booted=booted_long_ago)
    task_id = store.create(new_task(text_message("user", "go"))).task["id"]
    assert transition(store, task_id, to_state(WORKING)).applied
    log = tmp_path / ".log" / f"{task_id}.jsonl"
    for n in range(BURST // 2):
        chunk(store, task_id, f"before-{n}")
    kept = log.stat().st_size  # what a lost second would leave
    for n in range(BURST // 2, BURST):
        chunk(store, task_id, f"before-{n}")
    before = numbered(store, task_id)
    seen = store.read(task_id).seq  # type: ignore[union-attr]  # the client's Last-Event-ID
    keep = {"nothing-lost": log.stat().st_size, "last-lines-lost": kept, "mid-line": kept + 17}
    booted = power_cut(store, task_id, keep[cut])

    store = FileStore(tmp_path, fsync=EVERYSEC, booted=booted)
    if cut != "nothing-lost":  # numbers up to `seen` were handed out, then lost
        assert max(numbered(store, task_id)) < seen
    assert store.read(task_id) is not None
    after = [f"after-{n}" for n in range(5)]
    for text in after:
        chunk(store, task_id, text)
    assert transition(store, task_id, to_state(COMPLETED)).applied

    # No number names another event than it did before the crash.
    now = numbered(store, task_id)
    reused = {n for n in now if n in before and now[n] != before[n]}
    assert not reused, f"numbers reused after the power cut: {sorted(reused)[:5]}"
    new = sorted(set(now) - set(before))
    assert new and new[0] > seen
    assert new == list(range(new[0], new[0] + len(new)))  # a new lineage, then by one

    # The store's follower, from the pre-crash number.
    check_followed(store, task_id, seen, after)

    check_resumed_over_http(store, task_id, seen, after)


def test_numbers_run_on_by_one_while_the_machine_stays_up(tmp_path: Path) -> None:
    """A process that stops (or crashes) loses nothing: the next one, on the
    same boot, numbers on by one."""
    booted = time.time() - 3600
    store = FileStore(tmp_path, fsync=EVERYSEC, booted=booted)
    task_id = store.create(new_task(text_message("user", "go"))).task["id"]
    assert transition(store, task_id, to_state(WORKING)).applied
    chunk(store, task_id, "x")
    store = FileStore(tmp_path, fsync=EVERYSEC, booted=booted)  # a new process, same boot
    chunk(store, task_id, "y")
    assert sorted(numbered(store, task_id)) == [1, 2, 3, 4]


def test_a_task_file_from_before_the_boot_whose_log_was_lost_numbers_on_high(
    tmp_path: Path,
) -> None:
    """The whole log gone (its directory entry never reached the disk): the
    task file is adopted as it stands, numbered above anything handed out."""
    store = FileStore(tmp_path, fsync=EVERYSEC, booted=time.time() - 3600)
    task_id = store.create(new_task(text_message("user", "go"))).task["id"]
    assert transition(store, task_id, to_state(WORKING)).applied
    for n in range(5):
        chunk(store, task_id, f"before-{n}")
    booted = power_cut(store, task_id, None)

    store = FileStore(tmp_path, fsync=EVERYSEC, booted=booted)
    adopted = store.read(task_id)
    assert adopted is not None and adopted.seq > 7
    chunk(store, task_id, "after")
    assert min(numbered(store, task_id)) > 7


def test_the_boot_time_is_linux_btime_or_unknown(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3\nbtime 1764576000\nprocesses 9\n")
    assert booted_at(stat) == 1764576000.0
    stat.write_text("cpu  1 2 3\n")
    assert booted_at(stat) == 0.0  # then nothing predates a boot: numbers run on by one
    assert booted_at(tmp_path / "missing") == 0.0
