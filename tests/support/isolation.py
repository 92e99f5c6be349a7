"""Two callers against one deployment: what the second may learn of the first's tasks.

`replay_isolation(url, alice, bob)` is issue 12's first finding, replayed
over real HTTP for every method: Bob, holding valid credentials of his own,
tries to read, list, cancel, answer, follow, stream into and push-configure
Alice's task, to reuse her context and her messageId. Each attempt must
fail exactly as it would for a task that does not exist, and leave Alice's
task as it was; Alice then carries on. The agent is
`examples.agents:ask_back` (asks a name, then greets it).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

from tests.support.polling import wait_for

Params = Callable[[str], dict[str, Any]]
PUSH_METHODS = (
    ("CreateTaskPushNotificationConfig", "1.0"),
    ("GetTaskPushNotificationConfig", "1.0"),
    ("ListTaskPushNotificationConfigs", "1.0"),
    ("DeleteTaskPushNotificationConfig", "1.0"),
    ("tasks/pushNotificationConfig/set", None),
    ("tasks/pushNotificationConfig/get", None),
    ("tasks/pushNotificationConfig/list", None),
    ("tasks/pushNotificationConfig/delete", None),
)


# A2A 0.3's streaming methods answer with an event stream even when the method
# refuses (spec 0.3 §3.3.1): the refusal is its one event.
STREAMED_REFUSALS = frozenset({"tasks/resubscribe", "message/stream"})


def only_event(reply: requests.Response) -> dict[str, Any]:
    assert reply.headers["Content-Type"].startswith("text/event-stream"), reply.headers
    data = [line[5:].strip() for line in reply.text.splitlines() if line.startswith("data:")]
    assert len(data) == 1, reply.text[:300]
    answer: dict[str, Any] = json.loads(data[0])
    return answer


@dataclass(frozen=True)
class Caller:
    url: str
    headers: dict[str, str]

    def post(
        self, method: str, params: dict[str, Any], version: str | None = "1.0"
    ) -> requests.Response:
        body = {"jsonrpc": "2.0", "id": "rq", "method": method, "params": params}
        headers = {**self.headers, **({"A2A-Version": version} if version else {})}
        return requests.post(self.url + "/", json=body, headers=headers, timeout=30)

    def call(
        self, method: str, params: dict[str, Any], version: str | None = "1.0"
    ) -> dict[str, Any]:
        reply = self.post(method, params, version)
        assert reply.status_code == 200, (reply.status_code, reply.text[:300])
        if version is None and method in STREAMED_REFUSALS:
            return only_event(reply)
        assert reply.headers["Content-Type"].startswith("application/json"), reply.headers
        answer: dict[str, Any] = reply.json()
        return answer

    def result(self, method: str, params: dict[str, Any], version: str | None = "1.0") -> Any:
        reply = self.call(method, params, version)
        assert "result" in reply, reply
        return reply["result"]

    def send(self, text: str, **fields: Any) -> dict[str, Any]:
        message = {
            "role": "ROLE_USER",
            "messageId": fields.pop("messageId", uuid.uuid4().hex),
            "parts": [{"text": text}],
            **fields,
        }
        params = {"message": message, "configuration": {"returnImmediately": True}}
        task: dict[str, Any] = self.result("SendMessage", params)["task"]
        return task

    def task(self, task_id: str) -> dict[str, Any]:
        task: dict[str, Any] = self.result("GetTask", {"id": task_id})
        return task

    def wait(self, task_id: str, state: str) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            task = self.task(task_id)
            return task if task["status"]["state"] == state else None

        return wait_for(reached, timeout=30, what=f"task {task_id} to be {state}")

    def listed(self, **params: Any) -> list[str]:
        page = self.result("ListTasks", {"pageSize": 100, **params})
        return [task["id"] for task in page["tasks"]]


def same_but_for_the_id(
    attempt: dict[str, Any], task_id: str, ghost: dict[str, Any], ghost_id: str
) -> bool:
    """Whether two replies differ in nothing but the task id they name."""
    shown = json.dumps(attempt).replace(task_id, "<id>")
    return shown == json.dumps(ghost).replace(ghost_id, "<id>")


def replay_isolation(url: str, alice_headers: dict[str, str], bob_headers: dict[str, str]) -> None:
    alice, bob = Caller(url, alice_headers), Caller(url, bob_headers)
    context = f"ctx-alice-{uuid.uuid4().hex[:8]}"
    message_id = f"mid-{uuid.uuid4().hex[:8]}"
    asked = alice.send("hello", contextId=context, messageId=message_id)
    task_id = asked["id"]
    alice.wait(task_id, "TASK_STATE_INPUT_REQUIRED")
    before = alice.task(task_id)
    ghost = uuid.uuid4().hex  # an id no task has

    def as_for_a_ghost(method: str, params: Params, version: str | None) -> None:
        """Bob's attempt on Alice's task reads exactly like one on no task."""
        attempt = bob.call(method, params(task_id), version)
        unknown = bob.call(method, params(ghost), version)
        assert attempt["error"]["code"] == -32001, (method, attempt)
        assert same_but_for_the_id(attempt, task_id, unknown, ghost), (attempt, unknown)

    def follow_up(text: str) -> Params:
        def params(tid: str) -> dict[str, Any]:
            message = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "taskId": tid}
            return {"message": {**message, "parts": [{"text": text}]}}

        return params

    def by_id(tid: str) -> dict[str, Any]:
        return {"id": tid}

    # GetTask, CancelTask, a follow-up (SendMessage) in both generations' names.
    for method, version in (("GetTask", "1.0"), ("tasks/get", None)):
        as_for_a_ghost(method, by_id, version)
    for method, version in (("CancelTask", "1.0"), ("tasks/cancel", None)):
        as_for_a_ghost(method, by_id, version)
    for method, version in (("SendMessage", "1.0"), ("message/send", None)):
        as_for_a_ghost(method, follow_up("Mallory"), version)

    # The streaming methods refuse before any stream starts: a plain JSON reply on 1.0,
    # a stream of that one error on 0.3.
    for method, version in (("SubscribeToTask", "1.0"), ("tasks/resubscribe", None)):
        as_for_a_ghost(method, by_id, version)
    for method, version in (("SendStreamingMessage", "1.0"), ("message/stream", None)):
        as_for_a_ghost(method, follow_up("Mallory"), version)

    # Push configs: Bob can neither add, read, list nor delete Alice's; each
    # attempt reads like one on no task, and Alice's own config stays as it was.
    # Loopback and not allowed: a delivery worker refuses it and sends nothing.
    hook = {"url": "http://127.0.0.1:9/hook", "id": "alices", "token": "t-alice"}
    alices = alice.result("CreateTaskPushNotificationConfig", {"taskId": task_id, **hook})
    for method, version in PUSH_METHODS:

        def push_params(tid: str) -> dict[str, Any]:
            mallory = {"url": "https://mallory.example/hook", "id": "alices"}
            return {"taskId": tid, "id": tid, **mallory, "pushNotificationConfig": mallory}

        as_for_a_ghost(method, push_params, version)
    listed = alice.result("ListTaskPushNotificationConfigs", {"taskId": task_id})
    assert listed["configs"] == [alices], listed

    # ListTasks: only one's own, by any filter.
    assert task_id not in bob.listed()
    assert bob.listed(contextId=context) == []
    assert task_id in alice.listed(contextId=context)

    # Alice's context is hers; her messageId names nothing of Bob's.
    joining = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "contextId": context}
    taken = bob.call("SendMessage", {"message": {**joining, "parts": [{"text": "join"}]}})
    assert taken["error"]["code"] == -32602, taken
    own = bob.send("my own", messageId=message_id)
    assert own["id"] != task_id and own["contextId"] != context
    assert own["id"] not in alice.listed() and own["id"] in bob.listed()

    # Nothing Bob did reached Alice's task; she answers and it completes.
    after = alice.task(task_id)
    assert after == before, (before, after)
    assert "Mallory" not in str(after)
    alice.result(
        "SendMessage",
        follow_up("Alice")(task_id) | {"configuration": {"returnImmediately": True}},
    )
    done = alice.wait(task_id, "TASK_STATE_COMPLETED")
    assert done["artifacts"][0]["parts"][0]["text"] == "Hello, Alice!"

    # A second task of Alice's: Bob cannot cancel it, Alice can.
    second = alice.send("again")["id"]
    assert bob.call("CancelTask", {"id": second})["error"]["code"] == -32001
    canceled = alice.result("CancelTask", {"id": second})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"

    # Without credentials: 401, and nothing about any task.
    anonymous = Caller(url, {}).post("GetTask", {"id": task_id})
    assert anonymous.status_code == 401, anonymous.text
    assert anonymous.json()["error"]["code"] == -32000
