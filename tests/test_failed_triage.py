"""Failed tasks grouped by why they failed, and run again.

- On every store kind: each failure's cause is recorded privately where the
  task fails (`shared.failures`), a caller's look groups only its own newest
  failed tasks, an administrator's every owner's (`shared.store.triage`),
  and the cause never reaches the wire.
- The reaper records `worker-lost` and `input-timeout`.
- A look reads a bounded window of tasks, however many failed.
- Over real HTTP, against `toolnexus-serve` on a private Redis with its
  in-process workers running tests/support/triage_agent.py and three token
  principals (alice, bob, root the administrator): the console's calls
  (`/console/api/failed`, `/console/api/rerun`) scope to the caller, a
  rerun is a new task in the same context with the same message and
  `referenceTaskIds`, which a worker runs, and the failed task stays failed.
- The command (`toolnexus-serve tasks list|show|rerun`) on that same Redis
  store and server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import requests

from shared.dialects import VERSIONS, task_for
from shared.events import to_state
from shared.failures import (
    EXCEPTION,
    INPUT_TIMEOUT,
    NEWEST,
    OLDEST,
    TIMED_OUT,
    WORKER_LOST,
    Entry,
    Failure,
    failure_of,
)
from shared.store.triage import READS, SHOWN, WINDOW, look
from shared.store.wiring import abilities_of
from shared.stores.memory.store import MemoryStore
from shared.task import INPUT_REQUIRED, WORKING, new_task, text_message
from shared.transitions import transition
from tests.support.embedded import ROOT, embedded_server
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer, ci
from tests.support.store_kinds import Stores
from worker.cli.main import main
from worker.engine.failed_tasks import index_failed
from worker.engine.reaper import end_unanswered, reap_stale, sweep
from worker.engine.results import failed

TOKENS = {"alice": "alice-token", "bob": "bob-token", "root": "root-token"}


def _fail(store: Any, owner: str, text: str, failure: Failure) -> str:
    task = new_task(text_message("user", text), owner=owner)
    store.create(task)
    transition(store, task["id"], to_state(WORKING))
    index_failed(store, transition(store, task["id"], failed(f"{failure.group}: {text}", failure)))
    return task["id"]


def _counts(found: Any) -> dict[str, int]:
    return {group.failure.group: group.count for group in found.groups}


def test_failed_tasks_group_by_cause_for_their_owner_and_for_an_administrator(
    store_kind: str, stores: Stores
) -> None:
    store = stores.open(store_kind)
    alice = [
        _fail(store, "alice", "one", Failure(EXCEPTION, "ValueError")),
        _fail(store, "alice", "two", Failure(WORKER_LOST)),
        _fail(store, "alice", "three", Failure(EXCEPTION, "ValueError")),
    ]
    bob = [
        _fail(store, "bob", "four", Failure(TIMED_OUT)),
        _fail(store, "bob", "five", Failure(EXCEPTION, "KeyError")),
    ]
    store.create(new_task(text_message("user", "not failed"), owner="alice"))

    mine = look(store, "alice", None)
    assert _counts(mine) == {"exception: ValueError": 2, "worker-lost": 1}
    assert not mine.everyone and mine.total == 3 and mine.window == 3
    biggest = mine.groups[0]
    assert [task["id"] for task in biggest.tasks] == [alice[2], alice[0]]  # newest first
    assert biggest.ids == [alice[2], alice[0]]

    every = look(store, "root", abilities_of(store).indexes)
    assert every.everyone and every.window == 5
    assert _counts(every) == {
        "exception: ValueError": 2,
        "worker-lost": 1,
        "timed-out": 1,
        "exception: KeyError": 1,
    }
    assert {task["id"] for group in every.groups for task in group.tasks} == {*alice, *bob}

    # The cause is the service's own: no peer of any version sees it.
    task = store.get(bob[1])
    assert failure_of(task) == Failure(EXCEPTION, "KeyError")
    for version in VERSIONS:
        shown = task_for(version, task)
        assert "run" not in shown and "failure" not in repr(shown)


def test_the_reaper_records_a_lost_worker_and_an_unanswered_question() -> None:
    store = MemoryStore()
    lost = new_task(text_message("user", "lost"))
    store.create(lost)
    transition(store, lost["id"], to_state(WORKING))
    asked = new_task(text_message("user", "asked"))
    store.create(asked)
    transition(store, asked["id"], to_state(WORKING))
    transition(store, asked["id"], to_state(INPUT_REQUIRED))
    later = time.time() + 3600

    assert reap_stale(store, later, 30.0) == [lost["id"]]
    assert end_unanswered(store, later, 60.0) == [asked["id"]]
    assert failure_of(store.get(lost["id"])) == Failure(WORKER_LOST)
    assert failure_of(store.get(asked["id"])) == Failure(INPUT_TIMEOUT)
    assert _counts(look(store, "", None)) == {"worker-lost": 1, "input-timeout": 1}
    indexes = abilities_of(store).indexes
    assert _counts(look(store, "", indexes)) == {"worker-lost": 1, "input-timeout": 1}

    # A failure whose task is gone (expired, purged) leaves the index: the
    # reaper takes out the oldest such, and a look those it meets.
    assert indexes is not None
    long_ago = Entry("gone-long-ago", "worker-lost").member
    indexes.place(long_ago, {NEWEST: -1.0, OLDEST: 1.0})
    sweep(store, lambda task_id: None, later, 30.0)
    assert indexes.score(OLDEST, long_ago) is None
    kept = [Entry.of(member) for member, _ in indexes.range(OLDEST)]
    assert kept == [Entry(lost["id"], "worker-lost"), Entry(asked["id"], "input-timeout")]
    just_now = Entry("gone-just-now", "worker-lost").member
    indexes.place(just_now, {NEWEST: -later, OLDEST: later})
    assert _counts(look(store, "", indexes)) == {"worker-lost": 1, "input-timeout": 1}
    assert indexes.score(NEWEST, just_now) is None


class CountingStore(MemoryStore):
    """A memory store that counts the tasks a look reads."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0
        self.listed: list[int] = []

    def get(self, task_id: str) -> Any:
        self.gets += 1
        return super().get(task_id)

    def listing(self, query: Any) -> Any:
        self.listed.append(query.size)
        return super().listing(query)


def test_a_look_reads_a_bounded_window_however_many_tasks_failed() -> None:
    store = CountingStore()
    for number in range(WINDOW * 3):
        cause = Failure(EXCEPTION, "ValueError") if number % 2 else Failure(TIMED_OUT)
        _fail(store, "alice", f"task {number}", cause)
    store.gets, store.listed = 0, []

    every = look(store, "root", abilities_of(store).indexes)
    assert every.window == WINDOW and store.listed == []
    assert _counts(every) == {"exception: ValueError": WINDOW // 2, "timed-out": WINDOW // 2}
    assert store.gets == 2 * SHOWN <= READS  # the tasks shown, and no other
    assert [len(group.tasks) for group in every.groups] == [SHOWN, SHOWN]

    store.gets = 0
    mine = look(store, "alice", None)
    assert mine.window == WINDOW and mine.total == WINDOW * 3
    assert store.listed == [WINDOW] and store.gets == 0


# --- over HTTP, and the command ------------------------------------------------


@pytest.fixture(scope="module")
def redis() -> Iterator[str]:
    try:
        server = RedisServer().start()
    except (FileNotFoundError, RuntimeError, TimeoutError) as error:
        if ci():
            pytest.fail(f"NO REDIS: {error}")
        pytest.skip(f"NO REDIS: {error}")
    yield f"{server.url}/0"
    server.close()


@pytest.fixture(scope="module")
def served(redis: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {
        "TOOLNEXUS_RUN": "tests.support.triage_agent:run",
        "TOOLNEXUS_STORE": redis,
        "TOOLNEXUS_API_TOKENS": ",".join(f"{who}:{token}" for who, token in TOKENS.items()),
        "TOOLNEXUS_ADMIN_TOKENS": "root",
    }
    with embedded_server(tmp_path_factory.mktemp("triage"), env) as (host, port):
        yield f"http://{host}:{port}"


def call(base: str, who: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {TOKENS[who]}"}
    reply: dict[str, Any] = requests.post(f"{base}/", json=body, headers=headers, timeout=10).json()
    return reply


def send(base: str, who: str, text: str, context: str | None = None) -> str:
    message: dict[str, Any] = {
        "role": "ROLE_USER",
        "messageId": uuid.uuid4().hex,
        "parts": [{"text": text}],
    }
    if context:
        message["contextId"] = context
    params = {"message": message, "configuration": {"returnImmediately": True}}
    reply = call(base, who, "SendMessage", params)
    return str(reply["result"]["task"]["id"])


def settled(base: str, who: str, task_id: str, state: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        task: dict[str, Any] = call(base, who, "GetTask", {"id": task_id})["result"]
        return task if task["status"]["state"] == state else None

    return wait_for(found, timeout=30, what=f"task {task_id} to be {state}")


def failed_look(base: str, who: str | None) -> requests.Response:
    headers = {"Authorization": f"Bearer {TOKENS[who]}"} if who else {}
    return requests.get(f"{base}/console/api/failed", headers=headers, timeout=10)


def rerun(base: str, who: str, *ids: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKENS[who]}"}
    reply = requests.post(
        f"{base}/console/api/rerun", json={"ids": list(ids)}, headers=headers, timeout=10
    )
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()["reruns"]
    return answer


def by_group(answer: dict[str, Any]) -> dict[str, set[str]]:
    return {group["group"]: set(group["ids"]) for group in answer["groups"]}


FAILED = "TASK_STATE_FAILED"
COMPLETED = "TASK_STATE_COMPLETED"


def test_each_caller_sees_and_reruns_its_own_failed_tasks_and_root_every_owners(
    served: str,
) -> None:
    context = str(uuid.uuid4())
    value = send(served, "alice", "value one", context)
    key = send(served, "alice", "key two")
    theirs = send(served, "bob", "key three")
    for who, task_id in (("alice", value), ("alice", key), ("bob", theirs)):
        task = settled(served, who, task_id, FAILED)
        assert "run" not in task and "failure" not in str(task)  # the wire is unchanged

    alice = failed_look(served, "alice").json()
    assert not alice["admin"] and not alice["everyone"]
    assert by_group(alice) == {"exception: ValueError": {value}, "exception: KeyError": {key}}
    assert all("owner" not in task for group in alice["groups"] for task in group["tasks"])
    bob = failed_look(served, "bob").json()
    assert by_group(bob) == {"exception: KeyError": {theirs}}
    root = failed_look(served, "root").json()
    assert root["admin"] and root["everyone"]
    assert by_group(root)["exception: KeyError"] >= {key, theirs}
    owners = {t["id"]: t["owner"] for g in root["groups"] for t in g["tasks"]}
    assert owners[theirs] == "bob" and owners[value] == "alice"
    refused = failed_look(served, None)
    assert refused.status_code == 401 and "Bearer" in refused.headers["WWW-Authenticate"]

    # A caller cannot rerun another's task: it does not exist for them.
    assert rerun(served, "alice", theirs)[theirs]["error"]["code"] == 404
    settled(served, "bob", theirs, FAILED)

    # Alice reruns her own: a new task, same context, same message, referencing it.
    again = rerun(served, "alice", value)[value]
    assert again["repeated"] is False and again["taskId"] != value
    done = settled(served, "alice", again["taskId"], COMPLETED)
    assert done["contextId"] == context
    first = done["history"][0]
    assert first["referenceTaskIds"] == [value]
    assert first["parts"][0]["text"] == "value one"
    assert settled(served, "alice", value, FAILED)["status"]["state"] == FAILED
    # Asked again (a double click, a lost reply): the same rerun.
    assert rerun(served, "alice", value)[value] == {"taskId": again["taskId"], "repeated": True}

    # Root reruns Bob's: the new task is Bob's, as the failed one was.
    for_bob = rerun(served, "root", theirs)[theirs]["taskId"]
    assert settled(served, "bob", for_bob, COMPLETED)["history"][0]["referenceTaskIds"] == [theirs]
    assert call(served, "alice", "GetTask", {"id": for_bob})["error"]["code"] == -32001

    # Only a failed task is run again.
    finished = rerun(served, "alice", again["taskId"])[again["taskId"]]
    assert finished["error"]["code"] == 400, finished


def test_the_failed_page_is_served_with_the_consoles_policy(served: str) -> None:
    page = requests.get(f"{served}/console/failed", timeout=10)
    assert page.status_code == 200 and 'data-page="failed"' in page.text
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    listed = requests.get(f"{served}/console/", timeout=10).text
    assert 'href="/console/failed"' in listed


def test_a_rerun_refuses_what_is_not_a_list_of_ids(served: str) -> None:
    headers = {"Authorization": f"Bearer {TOKENS['root']}"}
    for body in ({"ids": []}, {"ids": "x"}, {"nothing": 1}):
        reply = requests.post(f"{served}/console/api/rerun", json=body, headers=headers, timeout=10)
        assert reply.status_code == 400, body
    as_form = requests.post(
        f"{served}/console/api/rerun", data={"ids": "x"}, headers=headers, timeout=10
    )
    assert as_form.status_code == 400


def tasks_command(redis: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """`toolnexus-serve tasks ...` as its own process, with the store's setting only."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLNEXUS_")}
    return subprocess.run(
        [sys.executable, "-m", "worker.cli.main", "tasks", *argv],
        env={**clean, "TOOLNEXUS_STORE": redis, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def command(
    redis: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Ran]:
    """The same command in this process (what it prints, its exit status),
    with TOOLNEXUS_STORE and the variables given only."""

    def run(*argv: str, **env: str) -> Ran:
        for name in [name for name in os.environ if name.startswith("TOOLNEXUS_")]:
            monkeypatch.delenv(name)
        for name, value in {"TOOLNEXUS_STORE": redis, **env}.items():
            monkeypatch.setenv(name, value)
        status = main(["tasks", *argv])
        said = capsys.readouterr()
        return Ran(status, said.out, said.err)

    return run


def test_the_command_lists_shows_and_reruns_failed_tasks(
    redis: str, served: str, command: Callable[..., Ran]
) -> None:
    key = send(served, "bob", "key from the command line")
    settled(served, "bob", key, FAILED)

    listed = tasks_command(redis, "list", "--state", "failed")
    assert listed.returncode == 0, listed.stderr
    assert "every owner's failed tasks" in listed.stdout
    assert "\nexception: KeyError: " in listed.stdout and key in listed.stdout
    owned = command("list", "--state", "failed", "--owner", "alice")
    assert owned.returncode == 0 and key not in owned.stdout

    shown = command("show", key)
    assert shown.returncode == 0, shown.stderr
    assert "failure  exception: KeyError" in shown.stdout and "owner    bob" in shown.stdout
    assert command("show", "no-such-task").returncode == 1

    refused = command("rerun", key, "--url", served, TOOLNEXUS_TOKEN="wrong")
    assert refused.returncode == 1 and "HTTP 401" in refused.stderr
    ran = command("rerun", key, "--url", served, TOOLNEXUS_TOKEN=TOKENS["root"])
    assert ran.returncode == 0, ran.stderr
    new = ran.stdout.split(" -> ")[1].split()[0]
    assert settled(served, "bob", new, COMPLETED)["history"][0]["referenceTaskIds"] == [key]
