"""ListTasks: filters, newest-first order, cursor pages, and stores that cannot list."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared import Settings, memory_store
from shared.task import Task
from tests.support.store_kinds import Stores
from tests.test_web_support import PlayingDispatcher, complete, rpc, user_message
from web import create_app


@pytest.fixture
def store() -> Any:
    return memory_store()


@pytest.fixture
def client(store: Any) -> FlaskClient:
    return create_app(
        Settings(), store=store, dispatcher=PlayingDispatcher(store, auto=False)
    ).test_client()


def send(client: FlaskClient, text: str, context: str | None = None) -> Task:
    extra = {"contextId": context} if context else {}
    reply = rpc(client, "SendMessage", {"message": user_message(text, **extra)})
    task: Task = reply["result"]
    return task


def list_tasks(client: FlaskClient, version: str | None = "1.0", **params: Any) -> dict[str, Any]:
    reply = rpc(client, "ListTasks", params, version=version)
    assert "error" not in reply, reply
    result: dict[str, Any] = reply["result"]
    return result


def test_lists_newest_first_without_artifacts_by_default(client: FlaskClient, store: Any) -> None:
    ids = [send(client, f"t{index}")["id"] for index in range(3)]
    complete(store, ids[0])  # now the most recently updated
    result = list_tasks(client)
    assert [task["id"] for task in result["tasks"]] == [ids[0], ids[2], ids[1]]
    assert result["totalSize"] == 3
    assert result["pageSize"] == 50
    assert result["nextPageToken"] == ""
    assert all("artifacts" not in task for task in result["tasks"])
    assert result["tasks"][0]["status"]["state"] == "TASK_STATE_COMPLETED"
    with_artifacts = list_tasks(client, includeArtifacts=True)
    assert with_artifacts["tasks"][0]["artifacts"][0]["parts"] == [{"text": "ran: t0"}]


def test_filters_by_context_and_state(client: FlaskClient, store: Any) -> None:
    first = send(client, "a", "ctx-a")
    send(client, "b", "ctx-b")
    third = send(client, "c", "ctx-a")
    complete(store, third["id"])
    assert [t["id"] for t in list_tasks(client, contextId="ctx-a")["tasks"]] == [
        third["id"],
        first["id"],
    ]
    for state in ("TASK_STATE_COMPLETED", "completed"):
        found = list_tasks(client, status=state)
        assert [t["id"] for t in found["tasks"]] == [third["id"]]
        assert found["totalSize"] == 1
    assert list_tasks(client, contextId="ctx-a", status="TASK_STATE_SUBMITTED")["totalSize"] == 1


def test_pages_cover_every_task_once(client: FlaskClient) -> None:
    ids = {send(client, f"t{index}")["id"] for index in range(7)}
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = list_tasks(client, pageSize=3, pageToken=token)
        assert page["totalSize"] == 7
        seen += [task["id"] for task in page["tasks"]]
        pages += 1
        token = page["nextPageToken"]
        if not token:
            break
    assert pages == 3
    assert sorted(seen) == sorted(ids)


def test_history_length_and_timestamp_filter(client: FlaskClient, store: Any) -> None:
    old = send(client, "old")
    cutoff = old["status"]["timestamp"]
    new = send(client, "new")
    complete(store, new["id"])
    result = list_tasks(client, historyLength=1, statusTimestampAfter=cutoff)
    assert [task["id"] for task in result["tasks"]] == [new["id"]]
    assert [m["role"] for m in result["tasks"][0]["history"]] == ["ROLE_AGENT"]
    assert "history" not in list_tasks(client, historyLength=0)["tasks"][0]


def test_0_3_shapes_without_a_header(client: FlaskClient) -> None:
    send(client, "x")
    result = list_tasks(client, version=None)
    assert result["tasks"][0]["kind"] == "task"
    assert result["tasks"][0]["status"]["state"] == "submitted"


@pytest.mark.parametrize(
    "params",
    [
        {"pageSize": 0},
        {"pageSize": 101},
        {"pageSize": "ten"},
        {"status": "TASK_STATE_RUNNING"},
        {"pageToken": "not-a-token"},
        {"pageToken": "WzFd"},  # base64 of a JSON list, but not a cursor
        {"historyLength": -5},
        {"includeArtifacts": "yes"},
        {"statusTimestampAfter": "yesterday"},
        {"contextId": 5},
    ],
)
def test_bad_filters_are_32602(client: FlaskClient, params: dict[str, Any]) -> None:
    assert rpc(client, "ListTasks", params, version="1.0")["error"]["code"] == -32602


def test_store_without_all_is_unsupported_operation() -> None:
    class TwoMethodStore:
        def __init__(self) -> None:
            self.tasks: dict[str, Task] = {}

        def get(self, task_id: str) -> Task | None:
            return self.tasks.get(task_id)

        def save(self, task: Task) -> Task:
            self.tasks[task["id"]] = task
            return task

    store = TwoMethodStore()
    client = create_app(
        Settings(), store=store, dispatcher=PlayingDispatcher(store, auto=False)
    ).test_client()
    reply = rpc(client, "ListTasks", {}, version="1.0")
    assert reply["error"]["code"] == -32004
    assert reply["error"]["data"][0]["reason"] == "UNSUPPORTED_OPERATION"
    task = send(client, "still works")  # the rest of the service does not need `all`
    assert rpc(client, "GetTask", {"id": task["id"]})["result"]["id"] == task["id"]


def token(*cursor: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(cursor)).encode()).decode()


def test_a_page_token_from_the_future_is_refused_and_every_store_goes_on_serving(
    store_kind: str, stores: Stores
) -> None:
    """A store records the moment a listing reads as of and stamps later
    statuses after it: a forged moment years ahead would break every write."""
    opened = stores.open(store_kind)
    served = create_app(
        Settings(), store=opened, dispatcher=PlayingDispatcher(opened, auto=False)
    ).test_client()
    forged = [
        [time.time() + 3e14, 1.0, "x"],  # the year ten million
        [time.time() + 3600, 1.0, "x"],
        [float("inf"), 1.0, "x"],
        [float("nan"), 1.0, "x"],
        [time.time(), float("-inf"), "x"],
    ]
    for cursor in forged:
        reply = rpc(served, "ListTasks", {"pageToken": token(*cursor)}, version="1.0")
        assert reply["error"]["code"] == -32602, (cursor, reply)

    task = send(served, "still serving")
    assert list_tasks(served)["tasks"][0]["id"] == task["id"]
