"""Planted symbolic links in a file store directory.

Someone who can write into the store's directory (but should not reach
beyond it) plants links: a task file pointing at a file elsewhere, the
database pointing where the store would write. The store follows none of
them: a planted task reads as missing (and is logged), a write replaces a
planted task file rather than writing through it, and a planted database
or store folder is refused when the store opens.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared import Settings
from shared.errors import StoreError
from shared.stores.file.store import FileStore
from shared.task import text_message
from tests.test_web_support import PlayingDispatcher, rpc, user_message
from web import create_app

SECRET = "SENTINEL-OUTSIDE-THE-STORE"


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
    caplog.set_level(logging.WARNING, logger="shared.stores.file.store")

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


def test_a_planted_task_file_link_is_replaced_never_followed(layout: tuple[Path, Path]) -> None:
    store_dir, outside = layout
    store = FileStore(store_dir)
    client = client_on(store)
    earlier = rpc(client, "SendMessage", {"message": user_message()})["result"]["id"]
    task = store.get(earlier)
    assert task is not None
    (outside / "target.json").write_text("untouched")
    (store_dir / f"{earlier}.json").unlink()
    (store_dir / f"{earlier}.json").symlink_to(outside / "target.json")
    assert rpc(client, "GetTask", {"id": earlier})["error"]["code"] == -32001  # a link: unknown
    store.save(task)  # the write renames its file over the link
    assert (outside / "target.json").read_text() == "untouched"
    assert not (store_dir / f"{earlier}.json").is_symlink()
    assert rpc(client, "GetTask", {"id": earlier})["result"]["id"] == earlier
    assert [content for _, content in tree(outside).values()] == [b"untouched"]


def test_a_linked_store_folder_is_refused(layout: tuple[Path, Path]) -> None:
    store_dir, outside = layout
    (store_dir / ".store.db").symlink_to(outside / "planted.db")
    with pytest.raises(StoreError, match="symbolic link"):
        FileStore(store_dir)
    (store_dir / ".store.db").unlink()
    (store_dir / "linked").symlink_to(outside, target_is_directory=True)
    with pytest.raises(StoreError, match="symbolic link"):
        FileStore(store_dir / "linked")
    assert list(outside.iterdir()) == []


def test_what_the_store_creates_only_its_user_can_read(layout: tuple[Path, Path]) -> None:
    store_dir, _ = layout
    store = FileStore(store_dir / "made-by-the-store")
    client = client_on(store)
    task_id = rpc(client, "SendMessage", {"message": user_message()})["result"]["id"]
    made = [store.directory, store.directory / f"{task_id}.json"]
    made += list(store.directory.glob(".store.db*"))  # the database, its WAL and shared memory
    assert len(made) >= 4
    for path in made:
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, (path, oct(path.stat().st_mode))
