"""Writes the file-store directory `tests/data/file-store-ea656d4.tar.gz`
holds, with the file store of commit ea656d4, and what that store read back
from it (`expected.json` inside): the upgrade test opens it with today's
file store and reads the same.

    git worktree add /tmp/old ea656d4
    PYTHONPATH=/tmp/old python3 tests/data/make_file_store_ea656d4.py /tmp/ea656d4
    tar -C /tmp/ea656d4 -czf tests/data/file-store-ea656d4.tar.gz .

Tasks in every state, one of them with more than a snapshot's worth of
artifact chunks (several snapshot markers, events after the last), one with
a message key, one with a push config and a delivery cursor, one written by
hand as the seed's store would (a bare file, no log), a heartbeat, the
reaper's beat; finished tasks kept for ten years (`TERMINAL_TTL`).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from shared.events import artifact_update, to_state
from shared.push.contract import Cursor
from shared.stores.file.store import FileStore
from shared.task import new_task, text_message
from shared.transitions import transition

TERMINAL_TTL = 10 * 365 * 86400.0  # still kept whenever the test runs


def main(folder: Path) -> None:
    store = FileStore(folder / "tasks", terminal_ttl=TERMINAL_TTL)
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
    push.put({**hook, "token": "tok", "version": "1.0"}, cap=5)  # type: ignore[typeddict-item]
    push.set_cursor(made["working"], "hook", Cursor(delivered=3, failures=1, since=1.5, given_up=0))
    seed = {"id": "seed-task", "status": {"state": "completed"}, "note": "by hand"}
    (folder / "tasks" / "seed-task.json").write_text(json.dumps(seed))
    made["seed"] = "seed-task"
    expected = {
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
    (folder / "expected.json").write_text(json.dumps(expected, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
