"""Issue 20, the file store's event log: torn writes survived, appends whole
or nothing, an fsync policy, a bounded log, reads that cost the tail.

A torn last line (a crash mid-append, a full disk, a file truncated by
hand) is made by truncating the log mid-line, as the issue's "done when"
asks; `get`, `events` and streams must keep working, through the store and
through a real `toolnexus-serve`.
"""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from shared import Settings
from shared.errors import ConfigError, StoreError
from shared.events import artifact_update, to_state
from shared.store.resolve import resolve_store
from shared.store.wiring import open_store
from shared.stores.file.log import Durability
from shared.stores.file.store import FileStore
from shared.task import COMPLETED, WORKING, new_task, state_of, text_message
from shared.transitions import transition
from tests.support.polling import wait_for
from tests.support.sse import Stream, results


def a_task(store: FileStore, text: str = "hello") -> str:
    return str(store.save(new_task(text_message("user", text)))["id"])


def chunk(n: int) -> Any:
    def change(current: Any) -> Any:
        artifact = {"artifactId": "out", "parts": [{"kind": "text", "text": str(n)}]}
        return [artifact_update(current, artifact, append=n > 0, last_chunk=False)]

    return change


def texts(task: Any) -> list[str]:
    return [part["text"] for part in task["artifacts"][0]["parts"]]


def log_of(store: FileStore, task_id: str) -> Path:
    return store.directory / ".log" / f"{task_id}.jsonl"


def cut_mid_line(path: Path, line_from_end: int = 1) -> bytes:
    """Truncate `path` in the middle of its `line_from_end`-th last line; the
    bytes removed."""
    data = path.read_bytes()
    lines = data.splitlines(keepends=True)
    start = len(b"".join(lines[:-line_from_end]))
    cut = start + len(lines[-line_from_end]) // 2
    os.truncate(path, cut)
    return data[cut:]


def working_task_with_chunks(store: FileStore, chunks: int) -> str:
    task_id = a_task(store)
    assert transition(store, task_id, to_state(WORKING)).applied
    for n in range(chunks):
        assert transition(store, task_id, chunk(n)).applied
    return task_id


# --- torn last lines --------------------------------------------------------


@pytest.mark.parametrize("line_from_end", [1, 2], ids=["the-last-line", "the-one-before"])
def test_a_torn_last_line_leaves_get_and_events_working(tmp_path: Path, line_from_end: int) -> None:
    store = FileStore(tmp_path)
    task_id = working_task_with_chunks(store, 5)  # chunks append only: no marker after them
    whole = store.get(task_id)
    numbers = [seq for seq, _ in store.events(task_id, 0)]
    cut_mid_line(log_of(store, task_id), line_from_end)
    kept = numbers[:-line_from_end]

    # The cut lines read as if never written: the task as of the event before.
    got = store.get(task_id)
    assert got is not None and texts(got) == texts(whole)[:-line_from_end]
    assert [seq for seq, _ in store.events(task_id, 0)] == kept
    assert store.events(task_id, kept[-1]) == []
    # The next write cuts the torn bytes off and appends whole lines after them.
    assert transition(store, task_id, chunk(99)).applied
    assert texts(store.get(task_id)) == [*texts(whole)[:-line_from_end], "99"]
    assert [seq for seq, _ in store.events(task_id, 0)] == [*kept, kept[-1] + 1]
    for line in log_of(store, task_id).read_bytes().splitlines():
        json.loads(line)  # every line whole again
    assert log_of(store, task_id).read_bytes().endswith(b"\n")


@pytest.mark.parametrize("line_from_end", [1, 2], ids=["its-marker", "its-final-event"])
def test_a_finished_task_whose_log_is_cut_still_reads_and_ends_its_streams(
    tmp_path: Path, line_from_end: int
) -> None:
    """A completed task is never written again, so a cut log is repaired on
    read: the task file is the task, and its status goes back in as the last
    event, so a follower still sees it finish."""
    store = FileStore(tmp_path)
    task_id = working_task_with_chunks(store, 3)
    done = transition(store, task_id, to_state(COMPLETED)).task
    cut_mid_line(log_of(store, task_id), line_from_end)
    assert store.get(task_id) == done
    events = store.events(task_id, 0)
    assert events[-1][1]["kind"] == "status-update"
    assert events[-1][1]["status"] == done["status"] and events[-1][1]["final"]
    numbers = [seq for seq, _ in events]
    assert numbers == sorted(set(numbers))
    assert FileStore(tmp_path).get(task_id) == done  # another process reads the same


# --- appends whole or not at all ---------------------------------------------


def test_short_writes_are_continued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileStore(tmp_path)
    task_id = a_task(store)
    real_write = os.write
    calls = []

    def short_write(fd: int, data: Any) -> int:
        calls.append(len(data))
        return real_write(fd, bytes(data[: max(1, len(data) // 3)]))

    monkeypatch.setattr(os, "write", short_write)
    assert transition(store, task_id, to_state(WORKING)).applied
    assert transition(store, task_id, chunk(0)).applied
    monkeypatch.undo()
    assert len(calls) > 2  # the appends did arrive in pieces
    assert texts(store.get(task_id)) == ["0"]
    for line in log_of(store, task_id).read_bytes().splitlines():
        json.loads(line)


def test_a_failed_append_leaves_nothing_and_the_task_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path)
    task_id = working_task_with_chunks(store, 2)
    before_bytes = log_of(store, task_id).read_bytes()
    before = store.get(task_id)
    real_write = os.write

    def disk_full(fd: int, data: Any) -> int:
        if len(data) > 20:  # write a part, then the disk is full
            real_write(fd, bytes(data[:20]))
            monkeypatch.setattr(os, "write", failing)
            return 20
        return failing(fd, data)

    def failing(fd: int, data: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(StoreError, match="No space left"):
        transition(store, task_id, chunk(2))
    monkeypatch.undo()
    assert log_of(store, task_id).read_bytes() == before_bytes  # the part was cut back
    assert store.get(task_id) == before
    assert transition(store, task_id, chunk(2)).applied
    assert texts(store.get(task_id)) == ["0", "1", "2"]


# --- trimmed to the limit ------------------------------------------------------


def test_the_log_is_trimmed_to_the_limit_and_the_task_stays_whole(tmp_path: Path) -> None:
    store = FileStore(tmp_path, log_limit=20)
    task_id = working_task_with_chunks(store, 200)
    numbers = [seq for seq, _ in store.events(task_id, 0)]
    assert 20 <= len(numbers) < 30  # trimmed to 20 when it reaches 30
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # contiguous
    assert numbers[-1] == 202  # submitted, working, 200 chunks
    assert texts(store.get(task_id)) == [str(n) for n in range(200)]
    assert FileStore(tmp_path).get(task_id) == store.get(task_id)
    done = transition(store, task_id, to_state(COMPLETED)).task
    assert store.get(task_id) == done
    assert not list((tmp_path / ".log").glob(".*.tmp"))


# --- reads cost the tail -------------------------------------------------------


def test_a_change_to_a_long_log_reads_its_tail_not_all_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path, fsync="no")
    task_id = working_task_with_chunks(store, 0)
    # About 700 KB of log in 300 events: fewer, larger events make the same
    # long log at a fifth of the cost (each change folds the growing task).
    big = "x" * 2000
    record = None
    for n in range(300):

        def change(current: Any, n: int = n) -> Any:
            artifact = {"artifactId": f"a{n}", "parts": [{"kind": "text", "text": big}]}
            return [artifact_update(current, artifact)]

        record = transition(store, task_id, change, current=record).record
    size = log_of(store, task_id).stat().st_size
    assert size > 600_000
    read = []
    real_pread = os.pread

    def counting(fd: int, length: int, offset: int) -> bytes:
        data = real_pread(fd, length, offset)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", counting)
    record = store.read(task_id)
    assert record is not None
    assert transition(store, task_id, chunk(0), current=record).applied
    monkeypatch.undo()
    assert sum(read) < size / 4, (sum(read), size)


# --- the fsync policy ----------------------------------------------------------


def synced_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return synced


def test_always_syncs_every_append_before_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path, fsync="always")
    task_id = a_task(store)
    synced = synced_paths(monkeypatch)
    assert transition(store, task_id, to_state(WORKING)).applied  # a snapshot: at rest? no
    assert transition(store, task_id, chunk(0)).applied
    log_path = str(log_of(store, task_id))
    assert synced.count(log_path) == 2
    created = synced_paths(monkeypatch)
    other = a_task(store)
    # a new task: its log, the log folder, the task file and the store folder
    assert str(log_of(store, other)) in created
    assert str(tmp_path / ".log") in created and str(tmp_path) in created


def test_everysec_syncs_in_the_background_and_no_never(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced = synced_paths(monkeypatch)
    lazy = FileStore(tmp_path / "lazy", fsync="everysec")
    task_id = a_task(lazy)
    log_path = str(log_of(lazy, task_id))
    assert log_path not in synced  # not inline
    lazy._durability.flush()  # what the background thread does each second
    assert log_path in synced
    never = FileStore(tmp_path / "never", fsync="no")
    synced.clear()
    other = a_task(never)
    transition(never, other, to_state(WORKING))
    never._durability.flush()
    assert synced == []


def test_everysec_flushes_by_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.polling import wait_for

    synced = synced_paths(monkeypatch)
    store = FileStore(tmp_path, fsync="everysec")
    store._durability = durability = Durability("everysec", interval=0.05)
    store._logs._durability = durability
    task_id = a_task(store)
    wait_for(lambda: str(log_of(store, task_id)) in synced, timeout=10, what="the flusher")


def test_the_fsync_policy_is_a_setting() -> None:
    assert Settings().file_fsync == "always"
    settings = Settings.from_env({"TOOLNEXUS_FILE_FSYNC": "everysec"})
    assert settings.file_fsync == "everysec"
    with pytest.raises(ConfigError, match=r"^TOOLNEXUS_FILE_FSYNC='sometimes': use always"):
        Settings.from_env({"TOOLNEXUS_FILE_FSYNC": "sometimes"})


def test_the_setting_reaches_the_file_store(tmp_path: Path) -> None:
    settings = Settings(store=f"file:{tmp_path}", file_fsync="no")
    store = open_store(settings)
    assert isinstance(store, FileStore) and store._durability.policy == "no"
    assert resolve_store(f"file:{tmp_path}")._durability.policy == "always"


# --- through a real server -------------------------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    from tests.support.embedded import embedded_server

    tasks = tmp_path / "tasks"
    env = {"TOOLNEXUS_STORE": f"file:{tasks}", "TOOLNEXUS_RUN": "examples.agents:countdown"}
    with embedded_server(tmp_path, env) as (host, port):
        yield f"http://{host}:{port}", tasks


def rpc(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    reply: dict[str, Any] = requests.post(
        url + "/", json=body, headers={"A2A-Version": "1.0"}, timeout=30
    ).json()
    return reply


def test_a_torn_log_line_through_the_api_leaves_get_and_streams_working(
    served: tuple[str, Path],
) -> None:
    url, tasks = served
    message = {"role": "ROLE_USER", "messageId": "torn-1", "parts": [{"text": "3"}]}
    sent = rpc(url, "SendMessage", {"message": message})["result"]["task"]
    assert sent["status"]["state"] == "TASK_STATE_COMPLETED", sent
    task_id = sent["id"]
    log_path = tasks / ".log" / f"{task_id}.jsonl"
    cut_mid_line(log_path, 2)  # the final event, and its marker with it

    got = rpc(url, "GetTask", {"id": task_id})
    assert got["result"]["status"]["state"] == "TASK_STATE_COMPLETED", got
    assert got["result"]["artifacts"] == sent["artifacts"]
    # A replay from the first event delivers every event to the final one, and ends.
    stream = Stream(url, "SubscribeToTask", {"id": task_id}, last_event_id=0)
    assert stream.is_stream, stream.json()
    replayed = results(list(stream))
    stream.close()
    assert replayed[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert all("task" not in r for r in replayed)  # events, no restart from a snapshot
    # and the store in this process agrees
    store = FileStore(tasks)
    assert state_of(store.get(task_id)) == COMPLETED
    assert store.events(task_id, 0)[-1][1]["final"]


def test_a_file_the_store_cannot_adopt_yet_is_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task file no marker names (here one the seed's store wrote: the bare
    task, no log) on a disk that refuses writes: `get` serves it, and the
    store adopts it once it can write again."""
    import shared.stores.file.log

    seed = {"id": "seed-1", "status": {"state": "completed"}, "artifacts": []}
    FileStore(tmp_path)  # the folders
    (tmp_path / "seed-1.json").write_text(json.dumps(seed))

    def read_only(fd: int, data: bytes) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(shared.stores.file.log, "_write_all", read_only)
    store = FileStore(tmp_path)
    assert store.get("seed-1") == seed
    assert store.events("seed-1", 0) == []
    monkeypatch.undo()
    assert store.get("seed-1") == seed
    assert [event["status"] for _, event in store.events("seed-1", 0)] == [seed["status"]]


def _complete_and_die_at_the_rename(directory: str, task_id: str, at_rename: Any) -> None:
    """In a child process: complete the task; at the rename of its task file
    (its events and the new file's marker logged) say so, and wait there to
    be killed."""
    rename = os.replace

    def stalled(source: Any, target: Any) -> None:
        if Path(target).name == f"{task_id}.json":
            at_rename.set()
            threading.Event().wait()  # the process dies here, by SIGKILL
        rename(source, target)

    os.replace = stalled  # this process's own os module only
    transition(FileStore(directory), task_id, to_state(COMPLETED))


def test_a_crash_between_the_log_and_the_rename_loses_nothing_logged(tmp_path: Path) -> None:
    """A whole write appends its events and the new file's marker, then
    renames the file: a crash before the rename leaves the older file, and a
    read folds the logged events over it (once: the older file's own marker
    says where it stands). The crash is a writer process killed at the rename."""
    store = FileStore(tmp_path)
    task_id = working_task_with_chunks(store, 3)
    context = multiprocessing.get_context("spawn")
    at_rename = context.Event()
    writer = context.Process(
        target=_complete_and_die_at_the_rename, args=(str(tmp_path), task_id, at_rename)
    )
    writer.start()
    try:
        wait_for(
            lambda: at_rename.is_set() or writer.exitcode is not None,
            timeout=100,
            what="the writer to reach the rename",
        )
        assert at_rename.is_set(), f"the writer ended (exit {writer.exitcode}) before the rename"
    finally:
        writer.kill()  # SIGKILL: no finally, no except, nothing cleans up
        writer.join(30)
    assert writer.exitcode == -signal.SIGKILL
    # What a killed writer leaves: its finished temporary file, never renamed.
    (left,) = tmp_path.glob(f".{task_id}.json.*.tmp")
    assert state_of(json.loads(left.read_text())) == COMPLETED
    on_disk = json.loads((tmp_path / f"{task_id}.json").read_text())
    assert state_of(on_disk) != COMPLETED  # the rename never happened
    # The log holds whole lines only: the write reached it whole before the kill.
    raw = log_of(store, task_id).read_bytes()
    assert raw.endswith(b"\n")
    assert all(json.loads(line) for line in raw.splitlines())
    after = FileStore(tmp_path)  # the next process
    got = after.get(task_id)
    assert got is not None and state_of(got) == COMPLETED  # the logged event counts
    assert texts(got) == ["0", "1", "2"]  # and nothing is folded twice
    numbers = [seq for seq, _ in after.events(task_id, 0)]
    assert numbers == list(range(1, len(numbers) + 1))  # each event once, none half-read
    assert after.events(task_id, 0)[-1][1]["status"]["state"] == COMPLETED
    assert list(after.all()) == [task_id]  # the stray temporary file is no task
    assert not transition(after, task_id, to_state(WORKING)).applied  # final is final
