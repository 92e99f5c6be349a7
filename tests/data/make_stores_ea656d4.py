"""Writes the stores that `tests/data/*-ea656d4.tar.gz` hold, with the
stores of commit ea656d4, and what each store read back (`expected.json`
inside): the upgrade tests open them with today's stores and read the same.

    git worktree add /tmp/old ea656d4
    PYTHONPATH=/tmp/old python3 tests/data/make_stores_ea656d4.py file /tmp/ea-file
    tar -C /tmp/ea-file -czf tests/data/file-store-ea656d4.tar.gz .
    PYTHONPATH=/tmp/old python3 tests/data/make_stores_ea656d4.py redis /tmp/ea-redis
    tar -C /tmp/ea-redis -czf tests/data/redis-store-ea656d4.tar.gz .
    PYTHONPATH=/tmp/old python3 tests/data/make_stores_ea656d4.py postgres /tmp/ea-pg \
        postgresql://postgres@127.0.0.1:5432/postgres
    tar -C /tmp/ea-pg -czf tests/data/postgres-store-ea656d4.tar.gz .

Tasks in every state, one of them with more than a snapshot's worth of
artifact chunks (several snapshot markers, events after the last), one with
a message key, one with a push config and a delivery cursor, a heartbeat,
the reaper's beat; finished tasks kept for ten years (`TERMINAL_TTL`). The
file store also gets one task written by hand as the seed's store would (a
bare file, no log). Redis: a private redis-server (`redis-server` on the
PATH), its keys written out with DUMP and their time to live (`dump.json`).
PostgreSQL: the schema `toolnexus_ea656d4`, migrated by ea656d4's `db
upgrade`, written out by `pg_dump --inserts` (`dump.sql`) and dropped.
"""

from __future__ import annotations

import base64
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from shared.events import artifact_update, to_state
from shared.push.contract import Cursor
from shared.task import new_task, text_message
from shared.transitions import transition

TERMINAL_TTL = 10 * 365 * 86400.0  # still kept whenever the test runs
SCHEMA = "toolnexus_ea656d4"


def fill(store: Any) -> dict[str, Any]:
    """The tasks, heartbeat, beat and push state every store gets; what the
    store then reads of them."""
    made: dict[str, str] = {}

    def create(name: str, key: str | None = None) -> str:
        task = new_task(text_message("user", f"{name} please"), f"ctx-{name}", "alice")
        task["owner"] = "alice"
        assert store.create(task, key).created
        made[name] = task["id"]
        return task["id"]

    create("submitted", key="message-key-1")
    for name, states in (
        ("working", ["working"]),
        ("input", ["working", "input-required"]),
        ("completed", ["working", "completed"]),
        ("failed", ["working", "failed"]),
        ("canceled", ["canceled"]),
        ("long", ["working"]),
    ):
        task_id = create(name)
        for state in states:
            text = text_message("agent", f"{name}: {state}")
            assert transition(store, task_id, to_state(state, text)).applied
    for n in range(40):
        chunk = {"artifactId": "a1", "parts": [{"kind": "text", "text": f"chunk {n} "}]}
        change = lambda task, c=chunk, n=n: [artifact_update(task, c, append=n > 0)]  # noqa: E731
        assert transition(store, made["long"], change).applied
    store.heartbeat(made["working"])
    store.record_beat()
    push = store.push_store(ttl=TERMINAL_TTL)
    hook = {"id": "hook", "taskId": made["working"], "url": "https://hooks.example/a2a"}
    push.put({**hook, "token": "tok", "version": "1.0"}, cap=5)
    push.set_cursor(made["working"], "hook", Cursor(delivered=3, failures=1, since=1.5, given_up=0))
    return made


def expected(store: Any, made: dict[str, str]) -> dict[str, Any]:
    push = store.push_store(ttl=TERMINAL_TTL)
    return {
        "ids": made,
        "tasks": {name: store.get(task_id) for name, task_id in made.items()},
        "events": {name: store.events(task_id, 0) for name, task_id in made.items()},
        "stale": store.stale(math.inf),
        "waiting": store.waiting(math.inf),
        "interrupted": store.interrupted(math.inf),
        "beat": store.last_beat(),
        "push": push.configs(made["working"]),
        "cursor": vars(push.cursor(made["working"], "hook")),
        "pushing": push.pushing(),
    }


def file(folder: Path) -> None:
    from shared.stores.file.store import FileStore

    store = FileStore(folder / "tasks", terminal_ttl=TERMINAL_TTL)
    made = fill(store)
    seed = {"id": "seed-task", "status": {"state": "completed"}, "note": "by hand"}
    (folder / "tasks" / "seed-task.json").write_text(json.dumps(seed))
    made["seed"] = "seed-task"
    (folder / "expected.json").write_text(json.dumps(expected(store, made), indent=1))


def redis(folder: Path) -> None:
    import redis as redis_py

    from shared.stores.redis.store import redis_store

    port = 16000 + os.getpid() % 1000
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        url = f"redis://127.0.0.1:{port}/0"
        client = redis_py.Redis.from_url(url)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis_py.ConnectionError:
                time.sleep(0.05)
        store = redis_store(url, terminal_ttl=TERMINAL_TTL)
        made = fill(store)
        (folder / "expected.json").write_text(json.dumps(expected(store, made), indent=1))
        keys = {
            key.decode(): [base64.b64encode(client.dump(key)).decode(), client.pttl(key)]
            for key in client.scan_iter(count=1000)
        }
        (folder / "dump.json").write_text(json.dumps(keys, indent=1, sort_keys=True))
    finally:
        server.terminate()
        server.wait(10)


def postgres(folder: Path, url: str) -> None:
    import psycopg

    from shared.stores.postgres import postgres_store
    from shared.stores.postgres.schema import upgrade

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        upgrade(conn, SCHEMA)
    store = postgres_store(url, schema=SCHEMA, terminal_ttl=TERMINAL_TTL)
    made = fill(store)
    (folder / "expected.json").write_text(json.dumps(expected(store, made), indent=1))
    store.close()
    dump = subprocess.run(
        ["pg_dump", "--inserts", "--no-owner", "--no-privileges", "--schema", SCHEMA, url],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (folder / "dump.sql").write_text(dump)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")


if __name__ == "__main__":
    kind, where = sys.argv[1], Path(sys.argv[2])
    where.mkdir(parents=True, exist_ok=True)
    if kind == "postgres":
        postgres(where, sys.argv[3])
    else:
        {"file": file, "redis": redis}[kind](where)
