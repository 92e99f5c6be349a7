"""Push state kept by the earlier version of each shared store (its own
tables, keys or files, written here as that version laid them out) is read
back whole once the store keeps it over documents and indexes: configs,
cursors, which tasks are still swept, how long a finished task's state had
left. Leases are short-lived and not carried over."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from shared.keys import digest
from shared.push.contract import Cursor, PushConfig
from shared.stores.postgres import postgres_store, schema
from shared.stores.postgres.store import split_url
from tests.support.postgres import execute, fresh_schema, url_of
from tests.support.store_kinds import Stores

HOOK = "https://hooks.example/a2a"


def config(task: str, name: str) -> PushConfig:
    return {"id": name, "taskId": task, "url": HOOK, "token": f"tok-{name}", "version": "1.0"}


CURSOR = {"delivered": 7, "failures": 2, "since": 1_765_000_000.5, "given_up": 1}


def check_taken_over(store: Any) -> None:
    """What every earlier layout below holds: `swept` with two configs and
    a cursor, `finished` (done, forgotten in about an hour) with one,
    `kept` (done, kept for good) with one."""
    push = store.push_store(ttl=3600)
    assert push.pushing() == ["swept"]
    assert push.configs("swept") == [config("swept", "a"), config("swept", "b")]
    assert push.cursor("swept", "a") == Cursor(**CURSOR)
    assert push.cursor("swept", "b") == Cursor()
    assert push.configs("finished") == [config("finished", "a")]
    assert push.configs("kept") == [config("kept", "a")]
    assert push.lease("swept", "a", "new-holder", 30)  # the earlier lease is not carried over
    # The finished task's state still goes when it was to: about an hour from now.
    forget_at = store.documents.document(_name("finished")).value["forget_at"]
    assert time.time() + 3000 < forget_at < time.time() + 3700
    assert "forget_at" not in store.documents.document(_name("kept")).value
    # And it is the push state from now on: a change lands as on a new store.
    push.put(config("swept", "c"), cap=5)
    push.done("kept")
    assert [c["id"] for c in push.configs("swept")] == ["a", "b", "c"]


def _name(task_id: str) -> str:
    """A task's push document, as `shared.push.documents` names it."""
    return f"push:{digest('push', task_id)}"


def test_redis_push_keys_are_taken_over_once(stores: Stores) -> None:
    url = stores.url("redis")
    client = redis.Redis.from_url(url)
    prefix = "toolnexus:"
    for task, names in (("swept", "ab"), ("finished", "a"), ("kept", "a")):
        for name in names:
            client.hset(f"{prefix}push:cfg:{task}", name, json.dumps(config(task, name)))
    client.hset(f"{prefix}push:cur:swept", "a", json.dumps(CURSOR))
    client.sadd(f"{prefix}push:tasks", "swept")
    client.expire(f"{prefix}push:cfg:finished", 3600)
    client.set(f"{prefix}push:lease:swept:anything", "old-holder", px=60_000)
    check_taken_over(stores.open("redis"))
    assert client.keys(f"{prefix}push:c*") == [] and not client.exists(f"{prefix}push:tasks")
    assert client.exists(f"{prefix}push:upgraded")
    # A later start finds it done and looks no further.
    client.hset(f"{prefix}push:cfg:late", "a", json.dumps(config("late", "a")))
    assert stores.open("redis").push_store(ttl=3600).configs("late") == []
    client.close()


def test_file_push_folder_is_taken_over_and_goes(stores: Stores) -> None:
    directory = Path(stores.url("file").removeprefix("file:"))
    folder = directory / ".push"
    folder.mkdir(parents=True)
    for task, names, extra in (
        ("swept", "ab", {"pushing": True, "cursors": {"a": CURSOR}}),
        ("finished", "a", {"pushing": False, "forget_at": time.time() + 3600}),
        ("kept", "a", {"pushing": False}),
    ):
        state = {"configs": {n: config(task, n) for n in names}, "cursors": {}, **extra}
        (folder / f"{task}.json").write_text(json.dumps(state))
    (folder / "swept.leases.json").write_text(json.dumps({"a": ["old-holder", time.time() + 60]}))
    (folder / ".lock").write_text("")
    check_taken_over(stores.open("file"))
    assert not folder.exists()


def test_postgres_push_tables_move_into_documents(
    postgres_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = schema.migrations()
    earlier = [m.version for m in shipped].index(11)
    with fresh_schema(postgres_database, migrated=False) as url:
        _, name = split_url(url)
        assert name is not None
        with psycopg.connect(url_of(postgres_database), autocommit=True) as conn:
            monkeypatch.setattr(schema, "migrations", lambda: shipped[:earlier])
            schema.upgrade(conn, name)
            for task, names in (("swept", "ab"), ("finished", "a"), ("kept", "a")):
                for config_id in names:
                    body = json.dumps(config(task, config_id))
                    execute(url, "SELECT push_put(%s, %s, %s, 5)", (task, config_id, body))
            execute(
                url,
                "INSERT INTO push_cursors VALUES ('swept', 'a', %s, %s, %s, %s)",
                tuple(CURSOR.values()),
            )
            execute(
                url,
                "UPDATE push_tasks SET pushing = false, forget_at = %s WHERE task_id = 'finished'",
                (time.time() + 3600,),
            )
            execute(url, "UPDATE push_tasks SET pushing = false WHERE task_id = 'kept'")
            execute(
                url,
                "INSERT INTO push_leases VALUES ('swept', 'a', 'old-holder', %s)",
                (time.time() + 60,),
            )
            monkeypatch.setattr(schema, "migrations", lambda: shipped)
            schema.upgrade(conn, name)
        store = postgres_store(url)
        check_taken_over(store)
        tables = {
            t
            for (t,) in execute(
                url, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        }
        assert "indexes" in tables and not {t for t in tables if t.startswith("push_")}
        store.close()
