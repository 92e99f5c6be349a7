"""The store contract: one suite, parametrized over every store.

What passes here *is* what a store means: memory, file and Redis stores,
and a minimal user-supplied store made of two closures.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from shared import InvalidTaskId, StoreError, transition
from shared.events import Change, artifact_update, message_added, to_state
from shared.keys import digest
from shared.settings import Settings
from shared.store.resolve import resolve_store
from shared.store.wiring import is_full_store, open_store
from shared.stores.file.store import FileStore
from shared.stores.postgres import PostgresStore
from shared.stores.redis.store import RedisStore, redis_store
from shared.stores.sqlite.store import SqliteStore
from shared.task import (
    CANCELED,
    COMPLETED,
    FAILED,
    INPUT_REQUIRED,
    TERMINAL_STATES,
    WORKING,
    new_task,
    state_of,
    text_message,
)
from tests.support.postgres import execute
from tests.support.processes import answer_of, answers_of, ended_well
from tests.support.shortcuts import with_status
from tests.support.store_kinds import ALL, SHARED, Stores

HOSTILE_IDS = ["../x", "../../etc/passwd", "a/b", "", "\x00", "a\x00b", ".", "..", "x" * 10_000]
HOSTILE_IDS += ["é", "x" * 129]


def closure_store() -> SimpleNamespace:
    """The smallest store a user can hand over: two closures over a dict."""
    tasks: dict[str, Any] = {}

    def save(task: dict[str, Any]) -> dict[str, Any]:
        tasks[task["id"]] = copy.deepcopy(task)
        return task

    return SimpleNamespace(get=lambda task_id: copy.deepcopy(tasks.get(task_id)), save=save)


@pytest.fixture(params=[*ALL, "closures"])
def store_spec(request: pytest.FixtureRequest, stores: Stores) -> str | SimpleNamespace:
    if request.param == "closures":
        return closure_store()
    return stores.url(request.param)


@pytest.fixture
def store(store_spec: str | SimpleNamespace) -> Any:
    if isinstance(store_spec, SimpleNamespace):  # the closures: adapted where they are wired
        return open_store(Settings(), store_spec)
    return resolve_store(store_spec)


@pytest.fixture
def builtin_spec(store_kind: str, stores: Stores) -> str:
    return stores.url(store_kind)


@pytest.fixture(params=SHARED)
def shared_spec(request: pytest.FixtureRequest, stores: Stores) -> str:
    """A store that several processes can share."""
    return stores.url(request.param)


@pytest.fixture
def builtin(builtin_spec: str) -> Any:
    return resolve_store(builtin_spec)


def a_task(text: str = "hello") -> dict[str, Any]:
    return new_task(text_message("user", text))


def to(state: str, text: str = "") -> Change:
    return to_state(state, text_message("agent", text) if text else None)


# --- the two methods -------------------------------------------------------


def test_round_trip(store: Any) -> None:
    task = a_task("round trip ✓")
    assert store.save(task) == task
    assert store.get(task["id"]) == task


def test_save_returns_the_task(store: Any) -> None:
    task = a_task()
    returned = store.save(task)
    assert returned["id"] == task["id"]
    assert returned == task


def test_unknown_id_reads_none(store: Any) -> None:
    assert store.get("no-such-task") is None


def test_save_overwrites_by_id(store: Any) -> None:
    task = a_task()
    store.save(task)
    store.save(with_status(task, WORKING))
    assert state_of(store.get(task["id"])) == WORKING


def test_stored_copy_is_not_the_callers(store: Any) -> None:
    task = a_task()
    store.save(task)
    task["status"]["state"] = "mutated after save"
    got = store.get(task["id"])
    got["history"].clear()
    again = store.get(task["id"])
    assert state_of(again) == "submitted"
    assert len(again["history"]) == 1


def test_transition_works_on_every_store(store: Any) -> None:
    task = store.save(a_task())
    assert transition(store, task["id"], to(WORKING)).applied
    outcome = transition(store, task["id"], to(COMPLETED))
    assert outcome.applied and state_of(outcome.task) == COMPLETED
    refused = transition(store, task["id"], to(FAILED, "late"))
    assert not refused.applied
    assert state_of(store.get(task["id"])) == COMPLETED


def test_transition_only_from_the_given_states(store: Any) -> None:
    task = store.save(a_task())
    refused = transition(store, task["id"], to(FAILED, "x"), from_states={WORKING})
    assert not refused.applied and state_of(refused.task) == "submitted"
    claimed = transition(store, task["id"], to(WORKING), from_states={"submitted"})
    assert claimed.applied
    again = transition(store, task["id"], to(WORKING), from_states={"submitted"})
    assert not again.applied  # a second claim of the same submission is refused


def test_transition_with_a_stale_guess_of_the_current_task(store: Any) -> None:
    task = store.save(a_task())
    guess = store.read(task["id"])
    moved = transition(store, task["id"], to(WORKING)).record
    assert guess is not None and moved is not None
    # The caller still holds the submitted version: the write must not go
    # through on that guess where the store can compare, and the re-read decides.
    outcome = transition(store, task["id"], to(CANCELED), current=guess)
    assert outcome.applied
    assert state_of(store.get(task["id"])) == CANCELED
    late = transition(store, task["id"], to(COMPLETED), current=moved)
    assert not late.applied
    assert state_of(store.get(task["id"])) == CANCELED


def test_transition_on_unknown_task(store: Any) -> None:
    outcome = transition(store, "missing", to(WORKING))
    assert outcome == type(outcome)(False, None)


# --- the seed's contract: a task needs only an id and a status ---------------

# The task shapes the seed's store table lists: nothing but an id and a
# status; a completed task with its artifacts; a failed one with the reason.
SEED_TASKS: list[dict[str, Any]] = [
    {"id": "seed-submitted", "status": {"state": "submitted"}},
    {"id": "seed-working", "status": {"state": "working"}},
    {
        "id": "seed-completed",
        "status": {"state": "completed"},
        "artifacts": [{"artifactId": "out", "parts": [{"kind": "text", "text": "42"}]}],
    },
    {
        "id": "seed-failed",
        "status": {
            "state": "failed",
            "message": {
                "kind": "message",
                "role": "agent",
                "messageId": "why",
                "parts": [{"kind": "text", "text": "the tool timed out"}],
            },
        },
    },
]


@pytest.mark.parametrize("task", SEED_TASKS, ids=lambda task: task["id"])
def test_a_seed_shaped_task_saves_and_reads_back(store: Any, task: dict[str, Any]) -> None:
    assert store.save(copy.deepcopy(task)) == task
    assert store.get(task["id"]) == task
    assert store.save({**task, "status": {"state": "canceled"}})["status"]["state"] == "canceled"
    assert store.get(task["id"]) == {**task, "status": {"state": "canceled"}}


def test_a_seed_shaped_task_moves_through_the_state_machine(store: Any) -> None:
    store.save({"id": "seed-run", "status": {"state": "submitted"}})
    assert transition(store, "seed-run", to(WORKING)).applied
    done = transition(store, "seed-run", to(COMPLETED, "finished"))
    assert done.applied and done.task is not None
    got = store.get("seed-run")
    assert got == done.task and "contextId" not in got
    assert state_of(got) == COMPLETED
    assert got["status"]["message"]["parts"] == [{"kind": "text", "text": "finished"}]
    assert not transition(store, "seed-run", to(FAILED, "late")).applied


def _save_all_in_child(spec: str, tasks: list[dict[str, Any]]) -> None:
    store = resolve_store(spec)
    for task in tasks:
        store.save(task)


def test_seed_shaped_tasks_written_by_one_process_are_read_by_another(shared_spec: str) -> None:
    context = multiprocessing.get_context("spawn")
    writer = context.Process(target=_save_all_in_child, args=(shared_spec, SEED_TASKS))
    writer.start()
    ended_well(writer)
    store = resolve_store(shared_spec)
    for task in SEED_TASKS:
        assert store.get(task["id"]) == task
    # and the other way round: a reader process sees what this one wrote
    ours = {"id": "seed-from-parent", "status": {"state": "completed"}, "artifacts": []}
    store.save(ours)
    answer = context.Queue()
    reader = context.Process(target=_get_in_child, args=(shared_spec, ours["id"], answer))
    reader.start()
    assert answer_of(reader, answer) == ours
    ended_well(reader)


def test_the_task_file_is_the_task_for_the_plain_json_module(tmp_path: Path) -> None:
    store = resolve_store(f"file:{tmp_path}")
    for task in SEED_TASKS:
        store.save(task)
        with open(tmp_path / f"{task['id']}.json", encoding="utf-8") as file:
            assert json.load(file) == task
    made = store.save(a_task("via the service"))
    transition(store, made["id"], to(WORKING))
    finished = transition(store, made["id"], to(COMPLETED, "done")).task
    with open(tmp_path / f"{made['id']}.json", encoding="utf-8") as file:
        on_disk = json.load(file)
    assert on_disk == finished == store.get(made["id"])
    assert on_disk["status"]["state"] == COMPLETED


def _old_format_task_dir(directory: Path) -> dict[str, Any]:
    """A task as the store wrote it before the task file was the bare task:
    {"seq": N, "task": ...} holding event 1, and two later events in the log."""
    task = a_task("written by an older version")
    working = to(WORKING)(task)[0]
    done = to(COMPLETED, "old but fine")(task)[0]
    (directory / ".log").mkdir(parents=True)
    lines = [
        {
            "seq": 1,
            "event": {
                "kind": "status-update",
                "taskId": task["id"],
                "contextId": task["contextId"],
                "status": task["status"],
                "final": False,
            },
        },
        {"seq": 2, "event": working},
        {"seq": 3, "event": done},
    ]
    log_text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    (directory / ".log" / f"{task['id']}.jsonl").write_text(log_text)
    wrapper = {"seq": 1, "task": task}
    (directory / f"{task['id']}.json").write_text(json.dumps(wrapper, indent=2))
    return task


def test_a_task_directory_of_the_older_format_keeps_working(tmp_path: Path) -> None:
    task = _old_format_task_dir(tmp_path)
    store = resolve_store(f"file:{tmp_path}")
    record = store.read(task["id"])
    assert record is not None and record.seq == 3
    assert state_of(record.task) == COMPLETED
    assert record.task["status"]["message"]["parts"][0]["text"] == "old but fine"
    assert [seq for seq, _ in store.events(task["id"], 0)] == [1, 2, 3]
    # Read once, the file was migrated: the bare task, as of event 1.
    assert json.loads((tmp_path / f"{task['id']}.json").read_text()) == task
    assert store.get(task["id"]) == record.task
    assert store.all() == {task["id"]: record.task}


_KILLED = """
import os, signal, sys
from shared.stores.file.store import FileStore
store = FileStore(sys.argv[1])
dies_in, when = sys.argv[2].split(":")
*path, name = dies_in.split(".")
owner = store
for step in path:
    owner = getattr(owner, step)
method = getattr(owner, name)

def killed(*args, **kwargs):
    if when == "after":
        method(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)

def arm():
    setattr(owner, name, killed)
"""

_CREATOR = (
    _KILLED
    + """
from shared.task import new_task, text_message
task = new_task(text_message("user", "hi"))
print(task["id"], flush=True)
arm()
store.create(task)
"""
)


def _killed_in(script: str, folder: Path, dies_in: str) -> str:
    """Run `script` on a file store in `folder` until it is SIGKILLed in the
    method `dies_in` of the store or of a part of it (`name:before`,
    `part.name:after`: before or after it runs); the
    id of the task it printed."""
    import subprocess
    import sys

    ran = subprocess.run(
        [sys.executable, "-c", script, str(folder), dies_in],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == -9, ran.stderr
    return ran.stdout.strip()


@pytest.mark.parametrize("dies_in", ["_files.written:before", "_files.written:after"])
def test_a_creator_killed_mid_create_leaves_no_task_the_re_sender_misses(
    tmp_path: Path, dies_in: str
) -> None:
    """SIGKILLed inside the create's transaction, before its task file is
    renamed into place or after (before the commit): a file left behind is
    the task, waiting (the re-sender finds it); with none, nothing is left."""
    task_id = _killed_in(_CREATOR, tmp_path, dies_in)
    store = FileStore(tmp_path)
    later = time.time() + 60
    if dies_in.endswith(":after"):  # the file is there: it is the task, and it waits
        assert store.get(task_id) is not None
        assert store.waiting(later) == [task_id]
    else:  # nothing was written: nothing is sent
        assert store.get(task_id) is None
        assert store.waiting(later) == []
        assert store.indexes.score("waiting", task_id) is None


_REPLIER = (
    _KILLED
    + """
from shared import transition
from shared.events import message_added, status_update, to_state
from shared.task import INPUT_REQUIRED, INTERRUPTED_STATES, SUBMITTED, WORKING
from shared.task import new_task, text_message
task_id = store.create(new_task(text_message("user", "ask: which?"))).task["id"]
transition(store, task_id, to_state(WORKING))
transition(store, task_id, to_state(INPUT_REQUIRED))
print(task_id, flush=True)
arm()
reply = text_message("user", "this one")
transition(  # the front end's follow-up (web.core.tasks)
    store,
    task_id,
    lambda task: [message_added(task, reply), status_update(task, SUBMITTED)],
    from_states=INTERRUPTED_STATES,
)
"""
)


@pytest.mark.parametrize("dies_in", ["_log.write:before", "_log.write:after"])
def test_a_front_end_killed_mid_follow_up_leaves_no_task_the_re_sender_misses(
    tmp_path: Path, dies_in: str
) -> None:
    """A reply to a task waiting for input, its writer SIGKILLed inside the
    reply's transaction, before its statements or after them (before the
    commit): the transaction is rolled back whole, so the task still waits
    for the peer, in no waiting index (the peer's retry of the reply then
    applies it)."""
    task_id = _killed_in(_REPLIER, tmp_path, dies_in)
    store = FileStore(tmp_path)
    task = store.get(task_id)
    assert task is not None
    assert state_of(task) == INPUT_REQUIRED
    assert store.waiting(time.time() + 60) == []
    assert store.indexes.score("waiting", task_id) is None


def test_a_task_file_replaced_out_of_band_is_adopted(tmp_path: Path) -> None:
    """A task file no log marker names (a hand edit, or a power cut between a
    rename and its marker reaching the disk) is the task as it stands, and
    later changes fold onto it."""
    store = resolve_store(f"file:{tmp_path}")
    task = store.save(a_task("to be edited"))
    transition(store, task["id"], to(WORKING))
    edited = {**store.get(task["id"]), "metadata": {"edited": "by hand"}}
    (tmp_path / f"{task['id']}.json").write_text(json.dumps(edited))
    assert store.get(task["id"]) == edited
    # a change that only appends (a chunk of progress) still folds onto the edit
    assert transition(store, task["id"], lambda t: [message_added(t, text_message("agent", "p"))])
    got = store.get(task["id"])
    assert got["metadata"] == {"edited": "by hand"}
    assert got["history"][-1]["parts"][0]["text"] == "p"
    assert state_of(got) == WORKING


def test_readers_never_see_a_task_folded_twice_while_it_is_rewritten(tmp_path: Path) -> None:
    """Lock-free readers racing snapshot rewrites: the task file and the
    number of the last event it includes are in two files (the file and its
    log marker), and a reader that paired a file with another file's number
    would apply events twice (chunks repeated) or miss some."""
    store = resolve_store(f"file:{tmp_path}")
    task = store.save(a_task("chunks"))
    transition(store, task["id"], to(WORKING))
    stop, seen, errors = threading.Event(), [], []

    def read() -> None:
        before = 0
        while not stop.is_set():
            got = store.get(task["id"])
            parts = (got.get("artifacts") or [{"parts": []}])[0]["parts"]
            texts = [p["text"] for p in parts]
            if texts != [str(n) for n in range(len(texts))] or len(texts) < before:
                errors.append(texts)  # folded twice, or older than a read before
            before = len(texts)
            seen.append(len(texts))

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        for n in range(300):

            def chunk(current: Any, n: int = n) -> Any:
                artifact = {"artifactId": "a", "parts": [{"kind": "text", "text": str(n)}]}
                return [artifact_update(current, artifact, append=n > 0, last_chunk=False)]

            assert transition(store, task["id"], chunk).applied
    finally:
        stop.set()
        for reader in readers:
            reader.join()
    assert errors == []
    assert len(store.get(task["id"])["artifacts"][0]["parts"]) == 300
    assert max(seen) > 0


# --- bad data and hostile ids (built-in stores) ----------------------------


@pytest.mark.parametrize("task_id", HOSTILE_IDS, ids=repr)
def test_hostile_id_is_refused_on_save_and_reads_none(builtin: Any, task_id: str) -> None:
    with pytest.raises(InvalidTaskId, match="invalid task id"):
        builtin.save({**a_task(), "id": task_id})
    assert builtin.get(task_id) is None


def test_hostile_ids_touch_nothing_outside_the_directory(tmp_path: Path) -> None:
    directory = tmp_path / "deep" / "tasks"
    store = resolve_store(f"file:{directory}")
    secret = tmp_path / "deep" / "x.json"
    secret.write_text(json.dumps(a_task()))
    before = sorted(p for p in tmp_path.rglob("*") if directory not in p.parents)
    for task_id in HOSTILE_IDS:
        with pytest.raises(InvalidTaskId):
            store.save({**a_task(), "id": task_id})
        assert store.get(task_id) is None
        store.heartbeat(task_id)
    assert store.get("../x") is None  # the file exists one level up, and stays unread
    after = sorted(p for p in tmp_path.rglob("*") if directory not in p.parents)
    assert after == before


def test_missing_id_is_refused(builtin: Any) -> None:
    task = a_task()
    del task["id"]
    with pytest.raises(InvalidTaskId):
        builtin.save(task)


@pytest.mark.parametrize("content", [b"{truncated", b"", b"\xff\xfe not utf-8", b"[1, 2]", b"42"])
def test_corrupt_file_reads_none(tmp_path: Path, content: bytes) -> None:
    store = resolve_store(f"file:{tmp_path}")
    (tmp_path / "broken.json").write_bytes(content)
    assert store.get("broken") is None
    assert "broken" not in store.all()


@pytest.mark.parametrize("content", [b"{truncated", b"", b"\xff\xfe", b"[1, 2]", b"null"])
def test_corrupt_redis_value_reads_none(redis_url: str, content: bytes) -> None:
    store = resolve_store(redis_url)
    store.client.set("toolnexus:task:broken", content)
    assert store.get("broken") is None
    assert "broken" not in store.all()


@pytest.mark.parametrize("content", ["{truncated", "", "[1, 2]", "null", "42"])
def test_corrupt_postgres_row_reads_none(postgres_url: str, content: str) -> None:
    store = resolve_store(postgres_url)
    task = store.save(a_task())
    execute(postgres_url, "UPDATE tasks SET doc = %s WHERE id = %s", (content, task["id"]))
    assert store.get(task["id"]) is None
    assert task["id"] not in store.all()


def test_redis_key_of_wrong_type_reads_none(redis_url: str) -> None:
    store = resolve_store(redis_url)
    store.client.hset("toolnexus:task:hashed", "a", "b")
    assert store.get("hashed") is None


def test_a_change_is_refused_over_corrupt_data(shared_spec: str) -> None:
    spec = shared_spec
    store = resolve_store(spec)
    task = store.save(a_task())
    if isinstance(store, RedisStore):
        store.client.set(f"toolnexus:task:{task['id']}", b"garbage")
    elif isinstance(store, PostgresStore):
        execute(spec, "UPDATE tasks SET doc = 'garbage' WHERE id = %s", (task["id"],))
    elif isinstance(store, SqliteStore):
        store.database.write(
            lambda c: c.execute("UPDATE tasks SET doc = 'garbage' WHERE id = ?", (task["id"],))
        )
    else:
        assert isinstance(store, FileStore)
        (store.directory / f"{task['id']}.json").write_bytes(b"garbage")
    assert not transition(store, task["id"], to(WORKING)).applied
    assert store.get(task["id"]) is None


def test_file_store_writes_readable_json_and_no_temporaries(tmp_path: Path) -> None:
    store = resolve_store(f"file:{tmp_path}")
    task = store.save(a_task("grep me"))
    text = (tmp_path / f"{task['id']}.json").read_text()
    assert '\n  "status": {' in text and "grep me" in text
    assert json.loads(text) == task  # the file is the task itself
    assert not list(tmp_path.glob(".*.tmp"))


def test_file_store_creates_its_directory(tmp_path: Path) -> None:
    directory = tmp_path / "a" / "b" / "c"
    store = resolve_store(f"file:{directory}")
    store.save(a_task())
    assert directory.is_dir() and len(list(directory.glob("*.json"))) == 1


def test_redis_down_raises_one_store_error() -> None:
    from tests.support.redis_server import free_port

    store = redis_store(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5)
    for call in (
        lambda: store.get("some-task"),
        lambda: store.save(a_task()),
        lambda: store.stale(0.0),
        lambda: store.heartbeat("some-task"),
        store.all,
    ):
        with pytest.raises(StoreError, match=r"task store unavailable: Redis at 127\.0\.0\.1"):
            call()


def test_redis_terminal_tasks_expire_when_asked(redis_url: str) -> None:
    store = resolve_store(redis_url, terminal_ttl=3600)
    task = store.save(a_task())
    transition(store, task["id"], to(WORKING))
    assert store.client.ttl(f"toolnexus:task:{task['id']}") == -1
    transition(store, task["id"], to(COMPLETED))
    assert 3500 < store.client.ttl(f"toolnexus:task:{task['id']}") <= 3600


def test_redis_context_records_expire_with_the_last_finished_task(redis_url: str) -> None:
    store = resolve_store(redis_url, terminal_ttl=3600)
    first = store.create(a_task("ctx-1"), None).task
    context_key = f"toolnexus:ctx:{digest(first['contextId'])}"
    assert store.client.ttl(context_key) == -1  # kept while the task lives
    transition(store, first["id"], to(CANCELED))
    assert 3500 < store.client.ttl(context_key) <= 3600  # else one key per context, for ever
    later = a_task("ctx-2") | {"contextId": first["contextId"]}
    store.create(later, None)
    assert store.client.ttl(context_key) == -1  # a live task in the context keeps it
    transition(store, later["id"], to(CANCELED))
    assert 3500 < store.client.ttl(context_key) <= 3600


def test_all_lists_every_task(builtin: Any) -> None:
    saved = {t["id"]: t for t in (builtin.save(a_task(str(n))) for n in range(5))}
    assert builtin.all() == saved


# --- one process writes, another reads --------------------------------------


def _save_in_child(spec: str, task: dict[str, Any]) -> None:
    resolve_store(spec).save(task)


def _get_in_child(spec: str, task_id: str, answer: Any) -> None:
    answer.put(resolve_store(spec).get(task_id))


def test_a_task_saved_by_one_process_is_read_by_another(shared_spec: str) -> None:
    spec = shared_spec
    context = multiprocessing.get_context("spawn")
    written = a_task("from a child")
    child = context.Process(target=_save_in_child, args=(spec, written))
    child.start()
    ended_well(child)
    assert resolve_store(spec).get(written["id"]) == written

    ours = resolve_store(spec).save(a_task("from the parent"))
    answer = context.Queue()
    reader = context.Process(target=_get_in_child, args=(spec, ours["id"], answer))
    reader.start()
    assert answer_of(reader, answer) == ours
    ended_well(reader)


# --- terminal is final under concurrent writers ------------------------------

TRIALS = 200
RACERS = (COMPLETED, FAILED, CANCELED)


def _race_in_threads(store: Any, task_id: str) -> list[str]:
    barrier = threading.Barrier(len(RACERS))
    winners: list[str] = []

    def racer(state: str) -> None:
        barrier.wait()
        if transition(store, task_id, to(state, state)).applied:
            winners.append(state)

    threads = [threading.Thread(target=racer, args=(state,)) for state in RACERS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return winners


def test_one_terminal_state_wins_among_threads(builtin: Any) -> None:
    assert is_full_store(builtin)
    for _ in range(TRIALS):
        task = builtin.save(a_task())
        transition(builtin, task["id"], to(WORKING))
        winners = _race_in_threads(builtin, task["id"])
        assert len(winners) == 1, winners
        final = builtin.get(task["id"])
        assert state_of(final) == winners[0]
        assert final["status"]["message"]["parts"][0]["text"] == winners[0]
        assert not transition(builtin, task["id"], to(WORKING)).applied
        assert builtin.get(task["id"]) == final


def _race_in_process(spec: str, ids: list[str], state: str, start: Any, wins: Any) -> None:
    store = resolve_store(spec)
    start.wait()
    won = [i for i in ids if transition(store, i, to(state, state)).applied]
    wins.put((state, won))


def test_one_terminal_state_wins_among_processes(shared_spec: str) -> None:
    spec = shared_spec
    store = resolve_store(spec)
    ids = []
    for _ in range(TRIALS):
        task = store.save(a_task())
        transition(store, task["id"], to(WORKING))
        ids.append(task["id"])
    context = multiprocessing.get_context("spawn")
    start, wins = context.Barrier(len(RACERS)), context.Queue()
    racers = [
        context.Process(target=_race_in_process, args=(spec, ids, state, start, wins))
        for state in RACERS
    ]
    for racer in racers:
        racer.start()
    try:
        results = dict(answers_of(racers, wins))
        for racer in racers:
            ended_well(racer)
    finally:
        for racer in racers:  # one that crashed leaves the others at the barrier
            racer.kill()
    winner_of: dict[str, list[str]] = {i: [] for i in ids}
    for state, won in results.items():
        for task_id in won:
            winner_of[task_id].append(state)
    for task_id, states in winner_of.items():
        assert len(states) == 1, (task_id, states)
        final = store.get(task_id)
        assert state_of(final) == states[0]
        for late in (*RACERS, WORKING):  # and it never changes afterwards
            assert not transition(store, task_id, to(late, "late")).applied
        assert store.get(task_id) == final
    assert {state_of(t) for t in store.all().values()} <= TERMINAL_STATES


# --- the stale index, with the clock passed in -------------------------------


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clocked(store_kind: str, stores: Stores) -> tuple[Any, FakeClock]:
    clock = FakeClock()
    return stores.open(store_kind, clock=clock), clock


def test_stale_enumeration_with_an_injected_clock(clocked: tuple[Any, FakeClock]) -> None:
    store, clock = clocked
    assert is_full_store(store)
    old, young, done = (store.save(a_task(name)) for name in ("old", "young", "done"))
    clock.now = 100.0
    transition(store, old["id"], to(WORKING))
    transition(store, done["id"], to(WORKING))
    transition(store, done["id"], to(COMPLETED))
    clock.now = 200.0
    transition(store, young["id"], to(WORKING))

    assert store.stale(50.0) == []
    assert store.stale(150.0) == [old["id"]]
    assert sorted(store.stale(250.0)) == sorted([old["id"], young["id"]])

    clock.now = 300.0
    store.heartbeat(old["id"])
    assert store.stale(250.0) == [young["id"]]

    transition(store, young["id"], to(FAILED, "gone"))
    store.heartbeat(young["id"])  # a late heartbeat must not bring it back
    store.heartbeat(done["id"])
    assert store.stale(1e12) == [old["id"]]

    clock.now = 400.0  # one call for several: only the ones still working move
    store.heartbeat(young["id"], old["id"], done["id"], "never-saved")
    store.heartbeat()
    assert store.stale(350.0) == []
    assert store.stale(1e12) == [old["id"]]


def test_stale_query_on_an_empty_index(builtin: Any) -> None:
    assert builtin.stale(1e12) == []


def test_redis_stale_query_is_one_range_over_the_index(redis_url: str) -> None:
    clock = FakeClock(10.0)
    store = redis_store(redis_url, clock=clock)
    for _ in range(50):
        store.save(with_status(a_task(), COMPLETED))
    stale = transition(store, store.save(a_task())["id"], to(WORKING)).task
    assert stale is not None
    client = redis.Redis.from_url(redis_url)
    assert client.zcard("toolnexus:working") == 1  # terminal tasks never enter the index
    assert store.stale(11.0) == [stale["id"]]
