"""Stores written by an earlier version, opened by today's: a file store's
directory, a Redis store and a PostgreSQL schema written by the stores of
commit ea656d4 (`tests/data/make_stores_ea656d4.py`), with tasks in every
state, a long log, a message key, push state, a heartbeat and the reaper's
beat. After the upgrade (the file store: its takeover when it opens;
PostgreSQL: `toolnexus-serve db upgrade`'s migrations; Redis: nothing to
run) every read gives what that store read."""

from __future__ import annotations

import base64
import json
import math
import tarfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import redis

from shared.store.listing import Query, list_by_scan
from shared.stores.file.store import FileStore
from shared.stores.postgres import postgres_store
from shared.stores.postgres.schema import upgrade
from shared.stores.redis.store import redis_store
from shared.task import new_task, text_message
from tests.support.postgres import url_of
from tests.support.redis_server import RedisServer

DATA = Path(__file__).parent / "data"
TERMINAL_TTL = 10 * 365 * 86400.0  # as the earlier store was told


def unpacked(name: str, folder: Path) -> dict[str, Any]:
    with tarfile.open(DATA / name) as archive:
        archive.extractall(folder, filter="tar")
    return dict(json.loads((folder / "expected.json").read_text()))


def reads_as_before(store: Any, expected: dict[str, Any]) -> None:
    """Every read the earlier store made gives what it gave; its message key
    still names its task, and a listing holds the same tasks as a scan."""
    ids: dict[str, str] = expected["ids"]
    for name, task_id in ids.items():
        assert store.get(task_id) == expected["tasks"][name], name
        assert [[n, e] for n, e in store.events(task_id, 0)] == expected["events"][name], name
    assert sorted(store.stale(math.inf)) == sorted(expected["stale"])
    assert sorted(store.waiting(math.inf)) == sorted(expected["waiting"])
    assert sorted(store.interrupted(math.inf)) == sorted(expected["interrupted"])
    assert store.last_beat() == expected["beat"]
    push = store.push_store(ttl=TERMINAL_TTL)
    assert push.configs(ids["working"]) == expected["push"]
    assert vars(push.cursor(ids["working"], "hook")) == expected["cursor"]
    assert push.pushing() == expected["pushing"]
    again = new_task(text_message("user", "again"), owner="alice")
    again["owner"] = "alice"
    made = store.create(again, "message-key-1")
    assert not made.created and made.task["id"] == ids["submitted"]
    query = Query("alice", None, None, None, 50, time.time(), None)
    listed = store.listing(query)
    assert listed.total == 7  # alice's: every task but the seed's bare file
    assert listed == list_by_scan(store.all().values(), lambda _: [], query)
    for state in ("submitted", "working", "completed", "input-required"):
        query = Query("alice", None, state, None, 50, time.time(), None)
        assert store.listing(query) == list_by_scan(store.all().values(), lambda _: [], query)


def test_a_file_store_directory_written_by_ea656d4_reads_back_whole(tmp_path: Path) -> None:
    """Its tasks, logs past several snapshots and push state, and a bare file
    of the seed's, taken over when today's store opens; the earlier layout's
    files go."""
    expected = unpacked("file-store-ea656d4.tar.gz", tmp_path)
    directory = tmp_path / "tasks"
    reads_as_before(FileStore(directory, terminal_ttl=TERMINAL_TTL), expected)
    assert not any((directory / name).exists() for name in (".log", ".messages", ".expires"))
    # Another process opening it now finds it taken, and reads the same.
    assert FileStore(directory).get(expected["ids"]["long"]) == expected["tasks"]["long"]


def test_a_redis_store_written_by_ea656d4_reads_back_whole(tmp_path: Path) -> None:
    expected = unpacked("redis-store-ea656d4.tar.gz", tmp_path)
    dump: dict[str, list[Any]] = json.loads((tmp_path / "dump.json").read_text())
    server = RedisServer().start()
    try:
        client = redis.Redis.from_url(f"{server.url}/0")
        for key, (payload, ttl) in dump.items():
            client.restore(key, max(ttl, 0), base64.b64decode(payload))
        reads_as_before(redis_store(f"{server.url}/0", terminal_ttl=TERMINAL_TTL), expected)
    finally:
        server.close()


def test_a_postgresql_schema_written_by_ea656d4_reads_back_whole_after_db_upgrade(
    tmp_path: Path, postgres_database: str
) -> None:
    expected = unpacked("postgres-store-ea656d4.tar.gz", tmp_path)
    schema = f"ea_{uuid.uuid4().hex[:12]}"
    # pg_dump's psql commands (\\restrict) go; the rest is SQL, its schema renamed.
    sql = "\n".join(
        line
        for line in (tmp_path / "dump.sql").read_text().splitlines()
        if not line.startswith("\\")
    ).replace("toolnexus_ea656d4", schema)
    url = url_of(postgres_database)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.encode())
        conn.execute("SET search_path TO DEFAULT")
        applied = upgrade(conn, schema)
    try:
        assert applied, "the earlier schema is behind: its later migrations run"
        store = postgres_store(url, schema=schema, terminal_ttl=TERMINAL_TTL)
        try:
            reads_as_before(store, expected)
        finally:
            store.close()
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
