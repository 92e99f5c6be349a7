"""Push notification configs over JSON-RPC: A2A 1.0's four methods, 0.3's
four, a webhook given inline with a send, owners, the cap, bad input; and
the push store's contract on memory, file and Redis alike."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from shared import Settings, memory_store
from shared.push.contract import Cursor, PushConfig, PushStore, TooManyConfigs
from tests.support.polling import wait_for
from tests.support.shortcuts import push_store
from tests.support.store_kinds import Stores
from tests.test_web_support import PlayingDispatcher
from web import create_app
from worker.push.delivery import sweep

HOOK = "https://receiver.example/hook"


class Client:
    def __init__(self, settings: Settings | None = None) -> None:
        store = memory_store()
        app = create_app(settings or Settings(), store=store, dispatcher=PlayingDispatcher(store))
        self.http = app.test_client()

    def call(self, method: str, params: dict[str, Any], version: str | None = "1.0") -> Any:
        headers = {"A2A-Version": version} if version else {}
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return self.http.post("/", json=body, headers=headers).get_json()

    def result(self, method: str, params: dict[str, Any], version: str | None = "1.0") -> Any:
        reply = self.call(method, params, version)
        assert "result" in reply, reply
        return reply["result"]

    def task(self, **configuration: Any) -> str:
        message = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": [{"text": "hi"}]}
        params = {"message": message, "configuration": {"returnImmediately": True, **configuration}}
        return str(self.result("SendMessage", params)["task"]["id"])


def test_the_1_0_methods_create_get_list_page_and_delete() -> None:
    client = Client()
    task = client.task()
    made = client.result(
        "CreateTaskPushNotificationConfig",
        {
            "taskId": task,
            "id": "a",
            "url": HOOK,
            "token": "tok",
            "authentication": {"scheme": "Bearer", "credentials": "secret"},
        },
    )
    assert made == {
        "taskId": task,
        "id": "a",
        "url": HOOK,
        "token": "tok",
        "authentication": {"scheme": "Bearer", "credentials": "secret"},
    }
    assert client.result("GetTaskPushNotificationConfig", {"taskId": task, "id": "a"}) == made
    for name in "bcd":
        client.result("CreateTaskPushNotificationConfig", {"taskId": task, "id": name, "url": HOOK})
    first = client.result("ListTaskPushNotificationConfigs", {"taskId": task, "pageSize": 3})
    assert [c["id"] for c in first["configs"]] == ["a", "b", "c"]
    rest = client.result(
        "ListTaskPushNotificationConfigs",
        {"taskId": task, "pageSize": 3, "pageToken": first["nextPageToken"]},
    )
    assert [c["id"] for c in rest["configs"]] == ["d"] and rest["nextPageToken"] == ""
    assert client.result("DeleteTaskPushNotificationConfig", {"taskId": task, "id": "a"}) == {}
    # Idempotent: deleting it again is no error.
    assert client.result("DeleteTaskPushNotificationConfig", {"taskId": task, "id": "a"}) == {}
    gone = client.call("GetTaskPushNotificationConfig", {"taskId": task, "id": "a"})
    assert gone["error"]["code"] == -32001, gone


def test_the_0_3_methods_in_their_own_shapes() -> None:
    client = Client()
    task = client.task()
    config = {
        "url": HOOK,
        "token": "t",
        "authentication": {"schemes": ["Basic"], "credentials": "x"},
    }
    made = client.result(
        "tasks/pushNotificationConfig/set",
        {"taskId": task, "pushNotificationConfig": config},
        version=None,
    )
    # Without an id a config is named after its task, as the official SDK does.
    assert made == {"taskId": task, "pushNotificationConfig": {"id": task, **config}}
    got = client.result("tasks/pushNotificationConfig/get", {"id": task}, version=None)
    assert got == made
    listed = client.result("tasks/pushNotificationConfig/list", {"id": task}, version=None)
    assert listed == [made]
    deleted = client.result(
        "tasks/pushNotificationConfig/delete",
        {"id": task, "pushNotificationConfigId": task},
        version=None,
    )
    assert deleted is None
    assert client.result("tasks/pushNotificationConfig/list", {"id": task}, version=None) == []


def test_a_0_3_config_set_without_an_id_is_not_called_default() -> None:
    # The 0.3 kit's test_get_push_notification_config asks for "default" after a set
    # without an id. Spec 0.3 gives no config that name: the id is "set by the client"
    # (PushNotificationConfig.id) and pushNotificationConfigId is "The ID of the push
    # notification configuration to retrieve"; the official SDK names it after the task.
    client = Client()
    task = client.task()
    client.result(
        "tasks/pushNotificationConfig/set",
        {"taskId": task, "pushNotificationConfig": {"url": HOOK}},
        version=None,
    )
    asked = client.call(
        "tasks/pushNotificationConfig/get",
        {"id": task, "pushNotificationConfigId": "default"},
        version=None,
    )
    assert asked["error"]["code"] == -32001 and "default" in asked["error"]["message"], asked
    for params in ({"id": task}, {"id": task, "pushNotificationConfigId": task}):
        got = client.result("tasks/pushNotificationConfig/get", params, version=None)
        assert got["pushNotificationConfig"] == {"id": task, "url": HOOK}, (params, got)
    # 1.0 is untouched: the same config read by its id.
    assert (
        client.result("GetTaskPushNotificationConfig", {"taskId": task, "id": task})["url"] == HOOK
    )


@pytest.mark.parametrize(
    ("configuration", "version", "shown"),
    [
        ({"taskPushNotificationConfig": {"url": HOOK, "id": "inline"}}, "1.0", "inline"),
        ({"pushNotificationConfig": {"url": HOOK, "id": "inline"}}, None, "inline"),
    ],
)
def test_a_webhook_given_with_the_send_is_saved_with_its_task(
    configuration: dict[str, Any], version: str | None, shown: str
) -> None:
    client = Client()
    task = client.task(**configuration)
    listed = client.result("ListTaskPushNotificationConfigs", {"taskId": task})
    assert [(c["id"], c["url"]) for c in listed["configs"]] == [(shown, HOOK)]


def test_a_sweep_during_a_send_with_a_webhook_never_forgets_the_webhook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Beat's sweep forgets the webhooks of a task it cannot find (one that
    expired). A sweep run right before the store creates the task, and right
    after, must leave the send's webhook in place, and the next hand it on."""
    store = memory_store()
    push = store.push_store()
    assert push is not None
    handed: list[tuple[str, str]] = []
    creating = store.create

    def hand_on(task_id: str, config_id: str, holder: str) -> None:
        handed.append((task_id, config_id))

    def create(*args: Any, **kwargs: Any) -> Any:
        sweep(store, push, hand_on, 30)
        created = creating(*args, **kwargs)
        sweep(store, push, hand_on, 30)
        return created

    monkeypatch.setattr(store, "create", create)
    app = create_app(Settings(), store=store, dispatcher=PlayingDispatcher(store, auto=False))
    message = {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hi"}]}
    configuration = {"returnImmediately": True, "taskPushNotificationConfig": {"url": HOOK}}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message, "configuration": configuration},
    }
    reply = app.test_client().post("/", json=body, headers={"A2A-Version": "1.0"}).get_json()
    task = reply["result"]["task"]["id"]
    sweep(store, push, hand_on, 30)
    assert [config["url"] for config in push.configs(task)] == [HOOK]
    assert task in push.pushing()
    assert handed == [(task, task)]


def test_unknown_tasks_and_configs_are_task_not_found() -> None:
    client = Client()
    for method in ("GetTaskPushNotificationConfig", "ListTaskPushNotificationConfigs"):
        reply = client.call(method, {"taskId": "no-such-task", "id": "x"})
        assert reply["error"]["code"] == -32001, reply
    task = client.task()
    reply = client.call("GetTaskPushNotificationConfig", {"taskId": task, "id": "never"})
    assert reply["error"]["code"] == -32001, reply


def test_the_cap_on_configs_per_task() -> None:
    client = Client(Settings(push_max_configs=2))
    task = client.task()
    for name in ("a", "b"):
        client.result("CreateTaskPushNotificationConfig", {"taskId": task, "id": name, "url": HOOK})
    # Replacing one is fine; a third is refused.
    client.result("CreateTaskPushNotificationConfig", {"taskId": task, "id": "a", "url": HOOK})
    third = client.call(
        "CreateTaskPushNotificationConfig", {"taskId": task, "id": "c", "url": HOOK}
    )
    assert third["error"]["code"] == -32602, third


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"url": "ftp://receiver.example/"}, "url"),
        ({"url": "receiver.example/hook"}, "url"),
        ({"url": HOOK, "token": "a\r\nX-Evil: 1"}, "token"),
        (
            {"url": HOOK, "authentication": {"scheme": "Bearer", "credentials": "s\nX-Evil: 1"}},
            "authentication.credentials",
        ),
        (
            {"url": HOOK, "authentication": {"scheme": "Bearer x", "credentials": "s"}},
            "authentication.scheme",
        ),
    ],
)
def test_bad_webhooks_are_refused_naming_the_field_and_not_the_secret(
    fields: dict[str, Any], field: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = Client()
    task = client.task()
    caplog.set_level(logging.DEBUG)
    reply = client.call("CreateTaskPushNotificationConfig", {"taskId": task, **fields})
    assert reply["error"]["code"] == -32602, reply
    violations = reply["error"]["data"][1]["fieldViolations"]
    assert violations[0]["field"] == field, violations
    assert "X-Evil" not in str(reply) and "X-Evil" not in caplog.text
    assert client.result("ListTaskPushNotificationConfigs", {"taskId": task})["configs"] == []


def test_push_turned_off_answers_push_not_supported() -> None:
    client = Client(Settings(push=False))
    task = client.task()
    reply = client.call("CreateTaskPushNotificationConfig", {"taskId": task, "url": HOOK})
    assert reply["error"]["code"] == -32003, reply
    inline = {"message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"text": "x"}]}}
    inline["configuration"] = {"taskPushNotificationConfig": {"url": HOOK}}
    assert client.call("SendMessage", inline)["error"]["code"] == -32003


# --- the push store's contract, on every built-in store ---------------------


@pytest.fixture
def pushes(store_kind: str, stores: Stores) -> Iterator[PushStore]:
    store = stores.open(store_kind)
    found = push_store(store)
    assert found is not None
    assert push_store(store) is found  # decided once per store
    yield found


def config(task: str, name: str) -> PushConfig:
    return {"id": name, "taskId": task, "url": HOOK, "version": "1.0"}


def test_push_store_contract(pushes: PushStore) -> None:
    pushes.put(config("t1", "b"), cap=2)
    pushes.put(config("t1", "a"), cap=2)
    pushes.put({**config("t1", "a"), "token": "new"}, cap=2)  # a replacement, not a third
    with pytest.raises(TooManyConfigs):
        pushes.put(config("t1", "c"), cap=2)
    assert [c["id"] for c in pushes.configs("t1")] == ["a", "b"]
    assert pushes.config("t1", "a") == {**config("t1", "a"), "token": "new"}
    assert pushes.config("t1", "zz") is None and pushes.configs("t2") == []
    assert pushes.pushing() == ["t1"]

    assert pushes.cursor("t1", "a") == Cursor()
    pushes.set_cursor("t1", "a", Cursor(delivered=5, failures=2, since=1.5, given_up=1))
    assert pushes.cursor("t1", "a") == Cursor(5, 2, 1.5, 1)

    assert pushes.lease("t1", "a", "me", 30)
    assert pushes.lease("t1", "a", "me", 30)  # a renewal
    assert not pushes.lease("t1", "a", "you", 30)
    assert pushes.lease("t1", "b", "you", 30)  # another pair is another lease
    pushes.release("t1", "a", "you")  # not the holder: nothing happens
    assert not pushes.lease("t1", "a", "you", 30)
    pushes.release("t1", "a", "me")
    assert pushes.lease("t1", "a", "you", 0.001)
    # A lease nobody renews runs out.
    wait_for(lambda: pushes.lease("t1", "a", "me", 30), timeout=5, what="the lease to lapse")
    pushes.release("t1", "a", "me")

    # The sweep books a free pair only; a running delivery takes it over any
    # booking (its own message's or a later one's), and then holds it.
    assert pushes.book("t1", "a", "sent-1", 30)
    assert not pushes.book("t1", "a", "sent-2", 30)
    assert pushes.lease("t1", "a", "sent-2", 30)
    assert not pushes.lease("t1", "a", "sent-1", 30)
    assert not pushes.book("t1", "a", "sent-3", 30)
    pushes.release("t1", "a", "sent-2")
    assert pushes.book("t1", "a", "sent-4", 0.001)
    wait_for(lambda: pushes.book("t1", "a", "sent-5", 30), timeout=5, what="the booking to lapse")

    assert pushes.delete("t1", "a") and not pushes.delete("t1", "a")
    assert pushes.cursor("t1", "a") == Cursor()
    pushes.done("t1")
    assert pushes.pushing() == []
    pushes.forget("t1")
    assert pushes.configs("t1") == []


def test_a_finished_tasks_push_state_goes_after_the_task_ttl(
    store_kind: str, stores: Stores
) -> None:
    pushes = stores.open(store_kind).push_store(ttl=1)
    pushes.put(config("t1", "a"), cap=2)
    pushes.put(config("t2", "a"), cap=2)
    pushes.done("t1")
    assert pushes.configs("t1") != []  # kept a while: Get still answers after the end

    def forgotten() -> bool:
        pushes.pushing()  # the sweep's call, which also forgets what is due to go
        return pushes.configs("t1") == []

    wait_for(forgotten, timeout=10, what="t1's configs to go")
    assert pushes.configs("t2") != []  # a task still pushing keeps its own


def test_a_config_put_as_the_sweep_lets_its_task_go_is_still_swept(
    store_kind: str, stores: Stores
) -> None:
    """The sweep lets a finished, delivered task go (`done`) while a config
    is put on it: whichever comes first, the new config is swept."""
    pushes = stores.open(store_kind).push_store(ttl=3600)
    pushes.put(config("t1", "a"), cap=5)
    # The sweep checked "a" alone; "b" came before its `done`: refused.
    pushes.put(config("t1", "b"), cap=5)
    assert not pushes.done("t1", ["a"])
    assert pushes.pushing() == ["t1"]
    assert pushes.done("t1", ["a", "b"]) and pushes.pushing() == []
    # A put whose config lands while `done` runs: `done` between its index
    # entry and its write (the first of its document swaps runs `done`).
    documents = pushes._documents
    swapping = documents.swap
    ran: list[bool] = []

    def swap(name: str, *args: Any, **kwargs: Any) -> bool:
        if name.startswith("push:") and not ran:
            ran.append(pushes.done("t1", ["a", "b"]))
        return bool(swapping(name, *args, **kwargs))

    documents.swap = swap  # type: ignore[method-assign]
    try:
        pushes.put(config("t1", "c"), cap=5)
    finally:
        del documents.swap
    assert ran == [True]  # `done` itself saw only what it had checked
    assert pushes.pushing() == ["t1"]  # and the new config is swept all the same
    assert [c["id"] for c in pushes.configs("t1")] == ["a", "b", "c"]
