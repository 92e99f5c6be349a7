"""Issue 12, finding 5: planted symbolic links in a file store directory.

Someone who can write into the store's directory (but should not reach
beyond it) plants links: a task file pointing at a file elsewhere, lock
files pointing where a save would create files. The store follows none of
them: a planted task reads as missing (and is logged), a planted lock makes
the write fail instead of creating anything outside.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import zlib
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared import Settings
from shared.errors import StoreError
from shared.stores.file.store import FileStore
from shared.task import new_id, new_task, text_message
from tests.test_web_support import PlayingDispatcher, rpc, user_message
from web import create_app
from web.core.tasks import message_key

SECRET = "SENTINEL-OUTSIDE-THE-STORE"
STRIPES = 64


def outside_task(task_id: str) -> dict[str, Any]:
    """What a planted link points at: a readable task (no owner: anyone's)."""
    task = {
        "kind": "task",
        "id": task_id,
        "contextId": "ctx",
        "status": {"state": "completed", "timestamp": "2030-01-01T00:00:00+00:00"},
        "history": [text_message("user", SECRET)],
        "metadata": {"secret": SECRET},
    }
    return {"seq": 1, "task": task}


def tree(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under `root` (links not followed): mode and content."""
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder, name)
            info = path.lstat()
            content = b"" if path.is_symlink() else path.read_bytes()
            found[str(path.relative_to(root))] = (info.st_mode, content)
    return found


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """(store directory, a directory outside it)."""
    store_dir, outside = tmp_path / "store", tmp_path / "outside"
    store_dir.mkdir()
    outside.mkdir()
    return store_dir, outside


def client_on(store: FileStore) -> FlaskClient:
    return create_app(
        Settings(), store=store, dispatcher=PlayingDispatcher(store, auto=False)
    ).test_client()


def test_a_planted_task_link_reads_as_missing_and_is_logged(
    layout: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    store_dir, outside = layout
    store = FileStore(store_dir)
    client = client_on(store)
    mine = rpc(client, "SendMessage", {"message": user_message()})["result"]["id"]
    planted = json.dumps(outside_task("planted"))
    (outside / "secret.json").write_text(planted)
    (store_dir / "planted.json").symlink_to(outside / "secret.json")
    (store_dir / ".log" / "planted.jsonl").symlink_to(outside / "secret.json")
    caplog.set_level(logging.WARNING, logger="shared.stores.file.store")
    caplog.set_level(logging.WARNING, logger="shared.stores.file.log")

    for version in (None, "1.0"):
        error = rpc(client, "GetTask", {"id": "planted"}, version=version)["error"]
        assert error["code"] == -32001, error
        listed = rpc(client, "ListTasks", {"pageSize": 100}, version=version)["result"]
        ids = [task["id"] for task in listed["tasks"]]
        assert ids == [mine], ids
        assert SECRET not in json.dumps(listed)
    assert store.get("planted") is None and "planted" not in store.all()
    assert any("symbolic link" in r.message and "planted" in r.message for r in caplog.records)
    assert (outside / "secret.json").read_text() == planted


def test_planted_lock_links_create_nothing_outside(
    layout: tuple[Path, Path], caplog: pytest.LogCaptureFixture
) -> None:
    store_dir, outside = layout
    store = FileStore(store_dir)
    client = client_on(store)
    earlier = rpc(client, "SendMessage", {"message": user_message()})["result"]["id"]
    locks = store_dir / ".locks"
    for path in locks.iterdir():
        path.unlink()
    for stripe in range(STRIPES):
        (locks / str(stripe)).symlink_to(outside / f"created-{stripe}")
    before = tree(outside)
    caplog.set_level(
        logging.WARNING, logger="shared.stores.file.log"
    )  # the lock files are the log's

    reply = rpc(client, "SendMessage", {"message": user_message()})
    assert reply["error"]["code"] == -32603, reply  # the store refuses to write
    assert reply["error"]["message"] == "task store unavailable"
    canceled = rpc(client, "CancelTask", {"id": earlier})
    assert canceled["error"]["code"] == -32603, canceled
    with pytest.raises(StoreError):
        store.save(new_task(text_message("user", "direct")))

    assert tree(outside) == before == {}
    assert all((locks / str(stripe)).is_symlink() for stripe in range(STRIPES))
    assert any("refusing to follow" in r.message for r in caplog.records)
    # Reads take no lock: the earlier task is still served as it was.
    assert rpc(client, "GetTask", {"id": earlier})["result"]["id"] == earlier


def test_a_linked_store_folder_is_refused(layout: tuple[Path, Path]) -> None:
    store_dir, outside = layout
    (store_dir / ".locks").symlink_to(outside, target_is_directory=True)
    with pytest.raises(StoreError, match="symbolic link"):
        FileStore(store_dir)
    assert list(outside.iterdir()) == []


def test_what_the_store_creates_only_its_user_can_read(layout: tuple[Path, Path]) -> None:
    store_dir, _ = layout
    store = FileStore(store_dir / "made-by-the-store")
    client = client_on(store)
    task_id = rpc(client, "SendMessage", {"message": user_message()})["result"]["id"]
    for folder in (".log", ".locks", ".messages", ".contexts"):
        mode = stat.S_IMODE((store.directory / folder).stat().st_mode)
        assert mode & 0o077 == 0, (folder, oct(mode))
    made = [store.directory / f"{task_id}.json", store.directory / ".log" / f"{task_id}.jsonl"]
    made += list((store.directory / ".locks").iterdir())
    made += list(store.directory.glob(".store.db*"))  # the database, its WAL and shared memory
    assert len(made) >= 5
    for path in made:
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, (path, oct(path.stat().st_mode))


def test_create_whose_message_and_task_share_a_lock_stripe_completes(tmp_path: Path) -> None:
    """create used to take the message's stripe lock, then the task's inside
    it: the same stripe (1 create in 64) waited on itself for ever."""
    store = FileStore(tmp_path / "store")
    key = message_key("alice", "m-1")
    task = new_task(text_message("user", "hi"))
    while zlib.crc32(task["id"].encode()) % STRIPES != zlib.crc32(key.encode()) % STRIPES:
        task = {**task, "id": new_id()}
    created = store.create(task, key)
    assert created.created and store.get(task["id"]) is not None
    again = store.create({**task, "id": new_id()}, key)  # the same message: the same task
    assert not again.created and again.task["id"] == task["id"]
