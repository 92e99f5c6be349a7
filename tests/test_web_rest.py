"""The HTTP+JSON binding (spec 1.0.1 §11): every route, every error status
of §5.4, streams resumed by Last-Event-ID on both SSE routes, and the same
behaviour as JSON-RPC for the same scenario."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from shared import Settings, memory_store
from shared.dialects import V10 as V10_SHAPES
from shared.errors import StoreError
from shared.stores.memory.store import MemoryStore
from tests.support.polling import wait_for
from tests.support.served import Serve, serving_agents
from tests.support.sse import RestStream
from tests.test_web_support import ASK, PlayingDispatcher, rpc
from web import create_app
from web.core.streaming import Stream, Wire
from web.http.disconnects import HangupMonitor
from web.http.edge import open_stream
from web.http.observe import begin
from web.http.wsgi import WsgiRequest

V10 = {"A2A-Version": "1.0"}
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def message(text: str = "hello", **extra: Any) -> dict[str, Any]:
    parts = [{"text": text}]
    return {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": parts, **extra}


@pytest.fixture
def store() -> MemoryStore:
    return memory_store()


def client_for(store: Any, *, auto: bool = True, **settings: Any) -> FlaskClient:
    dispatcher = PlayingDispatcher(store, auto=auto)
    config = Settings(**{"blocking_timeout": 5, **settings})
    return create_app(config, store=store, dispatcher=dispatcher).test_client()


@pytest.fixture
def client(store: MemoryStore) -> FlaskClient:
    return client_for(store)


@pytest.fixture
def serve() -> Iterator[Serve]:
    with serving_agents() as serve:
        yield serve


def send(client: FlaskClient, text: str = "hello", **config: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"message": message(text)}
    if config:
        body["configuration"] = config
    response = client.post("/message:send", json=body, headers=V10)
    assert response.status_code == 200, response.data
    reply: dict[str, Any] = response.get_json()
    return reply


def refusal(
    response: Any, status: int, reason: str, domain: str = "a2a-protocol.org"
) -> dict[str, Any]:
    """Assert `response` is the google.rpc.Status error of spec §11.6."""
    assert response.status_code == status, response.data
    assert response.headers["Content-Type"] == "application/json"
    error: dict[str, Any] = response.get_json()["error"]
    assert error["code"] == status
    assert isinstance(error["status"], str) and error["status"].isupper()
    assert error["message"]
    info = error["details"][0]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert (info["reason"], info["domain"]) == (reason, domain)
    return error


# --- the routes ---------------------------------------------------------------------


def test_send_answers_the_1_0_send_message_response(client: FlaskClient) -> None:
    reply = send(client)
    assert set(reply) == {"task"}
    task = reply["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "kind" not in task and "owner" not in task
    assert task["history"][0]["role"] == "ROLE_USER"


def test_send_takes_a2a_json_and_snake_case_and_can_return_at_once(
    store: MemoryStore,
) -> None:
    client = client_for(store, auto=False)
    body = {"message": message(), "configuration": {"return_immediately": True}}
    response = client.post(
        "/message:send",
        data=json.dumps(body),
        headers={**V10, "Content-Type": "application/a2a+json"},
    )
    assert response.status_code == 200
    assert response.get_json()["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"


def test_a_repeated_message_id_is_the_same_task(client: FlaskClient) -> None:
    body = {"message": message()}
    first = client.post("/message:send", json=body, headers=V10).get_json()
    again = client.post("/message:send", json=body, headers=V10).get_json()
    assert first["task"]["id"] == again["task"]["id"]


def test_get_task_with_history_length(client: FlaskClient) -> None:
    task_id = send(client)["task"]["id"]
    full = client.get(f"/tasks/{task_id}", headers=V10).get_json()
    assert full["id"] == task_id and len(full["history"]) >= 1
    none = client.get(f"/tasks/{task_id}?historyLength=0", headers=V10).get_json()
    assert "history" not in none
    by_query = client.get(f"/tasks/{task_id}?A2A-Version=1.0&history_length=1").get_json()
    assert len(by_query["history"]) == 1


def test_list_tasks_reads_camel_case_query_parameters(client: FlaskClient) -> None:
    context = str(uuid.uuid4())
    for _ in range(3):
        body = {"message": message(contextId=context)}
        client.post("/message:send", json=body, headers=V10)
    send(client)  # another context
    query = f"/tasks?contextId={context}&pageSize=2&status=TASK_STATE_COMPLETED"
    page = client.get(query + "&includeArtifacts=true", headers=V10).get_json()
    assert page["pageSize"] == 2 and page["totalSize"] == 3 and len(page["tasks"]) == 2
    assert all(task["contextId"] == context for task in page["tasks"])
    rest = client.get(f"{query}&pageToken={page['nextPageToken']}", headers=V10).get_json()
    assert len(rest["tasks"]) == 1 and rest["nextPageToken"] == ""


def test_cancel_a_working_task_then_not_again(store: MemoryStore) -> None:
    client = client_for(store, auto=False)
    task_id = send(client, returnImmediately=True)["task"]["id"]
    canceled = client.post(f"/tasks/{task_id}:cancel", headers=V10)
    assert canceled.status_code == 200
    assert canceled.get_json()["status"]["state"] == "TASK_STATE_CANCELED"
    # §5.4: TaskNotCancelableError is 400 FAILED_PRECONDITION.
    again = client.post(f"/tasks/{task_id}:cancel", json={"metadata": {}}, headers=V10)
    error = refusal(again, 400, "TASK_NOT_CANCELABLE")
    assert error["status"] == "FAILED_PRECONDITION"
    assert error["details"][0]["metadata"] == {"taskId": task_id}


@pytest.mark.parametrize(
    ("verb", "path"),
    [
        ("POST", "/tasks/{id}/pushNotificationConfigs"),
        ("GET", "/tasks/{id}/pushNotificationConfigs"),
        ("GET", "/tasks/{id}/pushNotificationConfigs/c-1"),
        ("DELETE", "/tasks/{id}/pushNotificationConfigs/c-1"),
    ],
)
def test_push_config_routes_say_push_is_not_supported_when_it_is_off(
    store: MemoryStore, verb: str, path: str
) -> None:
    client = client_for(store, push=False)
    task_id = send(client)["task"]["id"]
    body = {"url": "https://example.com/hook"} if verb == "POST" else None
    response = client.open(path.format(id=task_id), method=verb, json=body, headers=V10)
    refusal(response, 400, "PUSH_NOTIFICATION_NOT_SUPPORTED")


def test_push_configs_over_http_json_run_the_same_methods(client: FlaskClient) -> None:
    task_id = send(client)["task"]["id"]
    base = f"/tasks/{task_id}/pushNotificationConfigs"
    config = {"id": "c-1", "url": "https://example.com/hook", "token": "t"}
    made = client.post(base, json=config, headers=V10)
    assert made.status_code == 200, made.data
    assert made.get_json() == {"taskId": task_id, **config}
    client.post(base, json={**config, "id": "c-2"}, headers=V10)
    first = client.get(f"{base}?pageSize=1", headers=V10).get_json()
    assert [c["id"] for c in first["configs"]] == ["c-1"] and first["nextPageToken"] == "c-1"
    rest = client.get(f"{base}?pageSize=1&pageToken=c-1", headers=V10).get_json()
    assert [c["id"] for c in rest["configs"]] == ["c-2"] and rest["nextPageToken"] == ""
    assert client.get(f"{base}/c-1", headers=V10).get_json() == made.get_json()
    assert client.delete(f"{base}/c-1", headers=V10).status_code == 200
    assert client.delete(f"{base}/c-1", headers=V10).status_code == 200  # idempotent
    refusal(client.get(f"{base}/c-1", headers=V10), 404, "TASK_NOT_FOUND")
    # The path names the task: a body naming another changes nothing.
    other = send(client)["task"]["id"]
    client.post(base, json={**config, "id": "c-3", "taskId": other}, headers=V10)
    assert client.get(f"/tasks/{other}/pushNotificationConfigs", headers=V10).get_json() == {
        "configs": [],
        "nextPageToken": "",
    }


def test_the_extended_card_is_offered_when_configured(store: MemoryStore) -> None:
    plain = client_for(store)
    refusal(plain.get("/extendedAgentCard", headers=V10), 400, "EXTENDED_AGENT_CARD_NOT_CONFIGURED")
    public = plain.get("/.well-known/agent-card.json").get_json()
    assert "extendedAgentCard" not in public["capabilities"]

    extra = {"description": "the full story", "documentationUrl": "https://example.com/docs"}
    client = client_for(store, extended_card=extra, api_tokens=("alice:tok-a",))
    public = client.get("/.well-known/agent-card.json").get_json()
    assert public["capabilities"]["extendedAgentCard"] is True
    assert public["description"] != "the full story"
    anonymous = client.get("/extendedAgentCard", headers=V10)
    refusal(anonymous, 401, "UNAUTHENTICATED")
    assert anonymous.headers["WWW-Authenticate"].startswith("Bearer")
    signed_in = {**V10, "Authorization": "Bearer tok-a"}
    card = client.get("/extendedAgentCard", headers=signed_in).get_json()
    assert card["description"] == "the full story"
    assert card["documentationUrl"] == "https://example.com/docs"
    assert card["supportedInterfaces"] == public["supportedInterfaces"]
    # The same card over JSON-RPC.
    reply = rpc(client, "GetExtendedAgentCard", {}, version="1.0", headers=signed_in)
    assert reply["result"] == card
    # A 0.3 client's name for it gets the card with the 0.3 fields.
    token = {"Authorization": "Bearer tok-a"}
    legacy = rpc(client, "agent/getAuthenticatedExtendedCard", {}, headers=token)["result"]
    assert legacy["description"] == "the full story"
    assert legacy["protocolVersion"] == "0.3.0" and legacy["url"].endswith("/")


def test_the_card_lists_the_http_json_interface_a_client_can_use(client: FlaskClient) -> None:
    card = client.get("/.well-known/agent-card.json").get_json()
    rest, draft = [i for i in card["supportedInterfaces"] if i["protocolBinding"] == "HTTP+JSON"]
    assert rest["protocolVersion"] == "1.0" and draft["protocolVersion"] == "1.1"
    assert draft["url"] == rest["url"]
    task_id = send(client)["task"]["id"]
    base = rest["url"].removeprefix("http://localhost")
    assert client.get(f"{base}/tasks/{task_id}", headers=V10).status_code == 200


# --- errors ------------------------------------------------------------------------------


def test_owners_see_only_their_tasks(store: MemoryStore) -> None:
    client = client_for(store, api_tokens=("alice:tok-a", "bob:tok-b"))
    alice, bob = ({**V10, "Authorization": f"Bearer {t}"} for t in ("tok-a", "tok-b"))
    created = client.post("/message:send", json={"message": message()}, headers=alice)
    task_id = created.get_json()["task"]["id"]
    assert client.get(f"/tasks/{task_id}", headers=alice).status_code == 200
    refusal(client.get(f"/tasks/{task_id}", headers=bob), 404, "TASK_NOT_FOUND")
    refusal(client.post(f"/tasks/{task_id}:cancel", headers=bob), 404, "TASK_NOT_FOUND")
    assert client.get("/tasks", headers=bob).get_json()["tasks"] == []
    refusal(client.get(f"/tasks/{task_id}", headers=V10), 401, "UNAUTHENTICATED")


@pytest.mark.parametrize(
    ("headers", "data", "status", "reason"),
    [
        ({"Content-Type": "text/plain"}, b'{"message": {}}', 415, "CONTENT_TYPE_NOT_SUPPORTED"),
        ({"Content-Type": "application/json"}, b"{not json", 400, "PARSE_ERROR"),
        ({"Content-Type": "application/json"}, b"[1, 2]", 400, "INVALID_REQUEST"),
        ({"Content-Type": "application/json"}, b"", 400, "INVALID_REQUEST"),
        ({"Content-Type": "application/json"}, b"x" * 2000, 413, "REQUEST_TOO_LARGE"),
        ({"Content-Type": "application/json", "Origin": "https://evil.example"}, b"{}", 403,
         "ORIGIN_NOT_ALLOWED"),
    ],
)  # fmt: skip
def test_bodies_refused_with_the_reason(
    store: MemoryStore, headers: dict[str, str], data: bytes, status: int, reason: str
) -> None:
    client = client_for(store, max_body=1000)
    response = client.post("/message:send", data=data, headers={**V10, **headers})
    refusal(response, status, reason)
    assert store.all() == {}


def test_invalid_params_name_the_field(client: FlaskClient) -> None:
    body = {"message": {"role": "ROLE_USER", "messageId": "m", "parts": []}}
    error = refusal(client.post("/message:send", json=body, headers=V10), 400, "INVALID_PARAMS")
    violation = error["details"][1]
    assert violation["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert violation["fieldViolations"][0]["field"] == "message.parts"
    for query in (
        "pageSize=x",
        "pageSize=0",
        "pageSize=--1",
        "pageSize=1e3",
        "pageSize=%EF%BC%91",  # a full-width digit one
        "includeArtifacts=maybe",
        "status=DONE",
    ):
        refusal(client.get(f"/tasks?{query}", headers=V10), 400, "INVALID_PARAMS")
    refusal(client.get("/tasks/no-such-task?historyLength=-1", headers=V10), 400, "INVALID_PARAMS")
    refusal(client.get("/tasks/bad%20id", headers=V10), 400, "INVALID_PARAMS")


def test_part_media_types_the_agent_does_not_take_are_400(store: MemoryStore) -> None:
    client = client_for(store, input_modes=("text/plain",))
    part = {"raw": "aGk=", "mediaType": "image/png"}
    body = {"message": {**message(), "parts": [part]}}
    error = refusal(
        client.post("/message:send", json=body, headers=V10), 400, "CONTENT_TYPE_NOT_SUPPORTED"
    )
    assert error["status"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize("version", [None, "0.3", "99.0"])
def test_this_interface_speaks_1_0_only(client: FlaskClient, version: str | None) -> None:
    headers = {} if version is None else {"A2A-Version": version}
    response = client.get("/tasks", headers=headers)
    error = refusal(response, 400, "VERSION_NOT_SUPPORTED")
    assert "A2A-Version" in error["message"] or "A2A-Version" in json.dumps(error)


def test_a_finished_task_has_nothing_to_subscribe_to(client: FlaskClient) -> None:
    task_id = send(client)["task"]["id"]
    for verb in ("GET", "POST"):
        response = client.open(f"/tasks/{task_id}:subscribe", method=verb, headers=V10)
        refusal(response, 400, "UNSUPPORTED_OPERATION")
    refusal(client.get("/tasks/nope:subscribe", headers=V10), 404, "TASK_NOT_FOUND")


def test_a_store_fault_is_503_and_names_no_internals(store: MemoryStore) -> None:
    class Down:
        def get(self, task_id: str) -> None:
            raise StoreError("connection refused at 10.0.0.7:6379")

        def save(self, task: Any) -> Any:
            raise StoreError("connection refused at 10.0.0.7:6379")

    client = client_for(Down())
    error = refusal(
        client.get("/tasks/t-1", headers=V10), 503, "STORE_UNAVAILABLE", "toolnexus-serve"
    )
    assert "10.0.0.7" not in json.dumps(error)
    assert error["status"] == "UNAVAILABLE"


@pytest.mark.parametrize(
    ("verb", "path", "status", "reason", "allow"),
    [
        ("GET", "/message:send", 405, "METHOD_NOT_ALLOWED", "POST"),
        ("DELETE", "/tasks/t-1", 405, "METHOD_NOT_ALLOWED", "GET"),
        ("PUT", "/tasks/t-1:subscribe", 405, "METHOD_NOT_ALLOWED", "GET, POST"),
        ("POST", "/tasks", 405, "METHOD_NOT_ALLOWED", "GET"),
        ("GET", "/tasks/t-1/whatever", 404, "ROUTE_NOT_FOUND", None),
        ("GET", "/tasks/t-1/pushNotificationConfigs/c/d", 404, "ROUTE_NOT_FOUND", None),
        ("GET", "/acme/tasks/t-1", 404, "ROUTE_NOT_FOUND", None),  # no tenant is declared
        ("GET", "/no/such/path", 404, "ROUTE_NOT_FOUND", None),  # Flask's, same shape
        ("DELETE", "/healthz", 405, "METHOD_NOT_ALLOWED", None),
    ],
)
def test_unknown_routes_and_wrong_verbs_are_json(
    client: FlaskClient, verb: str, path: str, status: int, reason: str, allow: str | None
) -> None:
    response = client.open(path, method=verb, headers=V10)
    error = refusal(response, status, reason)
    assert b"<html" not in response.data.lower()
    if allow is not None:
        assert response.headers["Allow"] == allow
    if path.startswith("/acme"):
        assert "tenant 'acme'" in error["message"]


# --- streams ----------------------------------------------------------------------


def events_of(stream: RestStream) -> list[tuple[int | None, dict[str, Any]]]:
    assert stream.is_stream, stream.response.text
    return [(event.id, event.data) for event in stream]


def test_a_send_stream_is_bare_stream_responses_with_ids(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    url, _ = serve("examples.agents:countdown")
    with caplog.at_level(logging.INFO, logger="web.requests"):
        stream = RestStream(url, "POST", "/message:stream", {"message": message("2")})
        events = events_of(stream)
        wait_for(lambda: any("events=" in r.getMessage() for r in caplog.records), timeout=10)
    (line,) = [r.getMessage() for r in caplog.records if "events=" in r.getMessage()]
    task_id = events[0][1]["task"]["id"]
    assert f"SendStreamingMessage dialect=http+json task_id={task_id} events={len(events)}" in line
    ids = [seq for seq, _ in events]
    assert ids == list(range(1, len(ids) + 1))
    first, *updates = (data for _, data in events)
    assert set(first) == {"task"} and "jsonrpc" not in first
    assert all(len(update) == 1 for update in updates)
    assert updates[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


def test_both_stream_routes_resume_after_last_event_id(serve: Serve) -> None:
    url, _ = serve("examples.agents:countdown")
    sent = message("0.2 4")
    first = RestStream(url, "POST", "/message:stream", {"message": sent})
    seen = []
    for event in first:
        seen.append(event)
        if len(seen) == 3:
            break
    first.close()  # the connection drops after event 3
    again = RestStream(url, "POST", "/message:stream", {"message": sent}, last_event_id=3)
    rest = events_of(again)
    ids = [event.id for event in seen] + [seq for seq, _ in rest]
    assert ids == list(range(1, len(ids) + 1))  # no gap, no duplicate
    assert rest[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    task_id = seen[0].data["task"]["id"]
    for verb in ("GET", "POST"):
        path = f"/tasks/{task_id}:subscribe"
        tail = events_of(RestStream(url, verb, path, last_event_id=ids[-3]))
        assert [seq for seq, _ in tail] == ids[-2:]
        assert [data for _, data in tail] == [data for _, data in rest[-2:]]


def test_a_client_hanging_up_ends_its_stream_at_once(
    serve: Serve, caplog: pytest.LogCaptureFixture
) -> None:
    url, store = serve("examples.agents:ticking", keepalive=60.0)
    sent = {"message": message("30 ticks"), "configuration": {"returnImmediately": True}}
    reply = requests.post(f"{url}/message:send", json=sent, headers=V10, timeout=10).json()
    task_id = reply["task"]["id"]
    with caplog.at_level(logging.INFO, logger="web.requests"):
        stream = RestStream(url, "GET", f"/tasks/{task_id}:subscribe")
        next(iter(stream))
        stream.close()
        # Its line is written when the stream ends: long before the task's 30 s.
        wait_for(
            lambda: any("SubscribeToTask" in r.getMessage() for r in caplog.records), timeout=10
        )
    assert store.get(task_id)["status"]["state"] == "working"
    requests.post(f"{url}/tasks/{task_id}:cancel", headers=V10, timeout=10)


def test_a_subscription_follows_a_live_task_to_its_end(serve: Serve) -> None:
    url, _ = serve("examples.agents:ticking")
    sent = {"message": message("3 ticks"), "configuration": {"returnImmediately": True}}
    task_id = requests.post(f"{url}/message:send", json=sent, headers=V10, timeout=10).json()[
        "task"
    ]["id"]
    events = events_of(RestStream(url, "GET", f"/tasks/{task_id}:subscribe?A2A-Version=1.0"))
    assert "task" in events[0][1]
    assert events[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    refused = RestStream(url, "GET", "/tasks/no-such:subscribe")
    assert not refused.is_stream and refused.response.status_code == 404


# --- the same scenario through both bindings -----------------------------------------


def _scrub(value: Any) -> Any:
    """Ids and times vary from run to run; everything else must match."""
    if isinstance(value, dict):
        return {
            key: "<time>" if key == "timestamp" else _scrub(item) for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_scrub(item) for item in value]
    if isinstance(value, str):
        return UUID.sub("<id>", value)
    return value


class Binding:
    """One scenario step as a JSON-RPC call or as its HTTP+JSON route; both
    answer (result, error reason, error message)."""

    def __init__(self, client: FlaskClient, rest: bool) -> None:
        self.client, self.rest = client, rest

    def call(self, method: str, params: dict[str, Any]) -> tuple[Any, str | None, str | None]:
        if not self.rest:
            reply = rpc(self.client, method, params, version="1.0")
            if "error" in reply:
                error = reply["error"]
                return None, error["data"][0]["reason"], error["message"]
            return reply["result"], None, None
        response = self._route(method, params)
        body = response.get_json()
        if response.status_code != 200:
            return None, body["error"]["details"][0]["reason"], body["error"]["message"]
        return body, None, None

    def _route(self, method: str, params: dict[str, Any]) -> Any:
        task = params.get("id", "")
        if method == "SendMessage":
            return self.client.post("/message:send", json=params, headers=V10)
        if method == "GetTask":
            query = "".join(f"&{k}={v}" for k, v in params.items() if k != "id")
            return self.client.get(f"/tasks/{task}?A2A-Version=1.0{query}")
        if method == "CancelTask":
            return self.client.post(f"/tasks/{task}:cancel", headers=V10)
        assert method == "ListTasks"
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return self.client.get(f"/tasks?{query}", headers=V10)


def _scenario(binding: Binding, store: MemoryStore) -> list[Any]:
    context = str(uuid.UUID(int=7))
    answers: list[Any] = []
    done = binding.call("SendMessage", {"message": message("hi", messageId="m-1")})
    answers.append(done)
    task_id = done[0]["task"]["id"]
    asking = binding.call(
        "SendMessage", {"message": message(ASK, messageId="m-2", contextId=context)}
    )
    answers.append(asking)
    follow_up = message("Ada", messageId="m-3", taskId=asking[0]["task"]["id"])
    answers.append(binding.call("SendMessage", {"message": follow_up}))
    answers.append(binding.call("SendMessage", {"message": message("hi", messageId="m-1")}))
    answers.append(binding.call("GetTask", {"id": task_id, "historyLength": 1}))
    answers.append(binding.call("GetTask", {"id": "no-such-task"}))
    answers.append(binding.call("CancelTask", {"id": task_id}))
    answers.append(binding.call("CancelTask", {"id": "no-such-task"}))
    answers.append(binding.call("ListTasks", {"contextId": context, "pageSize": 5}))
    answers.append(binding.call("ListTasks", {"pageSize": 500}))
    bad = {"message": {"role": "ROLE_AGENT", "messageId": "m-4", "parts": [{"text": "x"}]}}
    answers.append(binding.call("SendMessage", bad))
    answers.append(sorted((_scrub(task) for task in store.all().values()), key=json.dumps))
    return answers


def test_both_bindings_give_the_same_tasks_results_and_errors() -> None:
    outcomes = []
    for rest in (False, True):
        store = memory_store()
        app = create_app(
            Settings(blocking_timeout=5), store=store, dispatcher=PlayingDispatcher(store)
        )
        outcomes.append(_scrub(_scenario(Binding(app.test_client(), rest), store)))
    over_rpc, over_rest = outcomes
    assert over_rpc == over_rest
    reasons = [step[1] for step in over_rpc[:-1]]
    assert reasons == [
        None,
        None,
        None,
        None,
        None,
        "TASK_NOT_FOUND",
        "TASK_NOT_CANCELABLE",
        "TASK_NOT_FOUND",
        None,
        "INVALID_PARAMS",
        "INVALID_PARAMS",
    ]
    states = [task["status"]["state"] for task in over_rpc[-1]]
    assert sorted(states) == ["completed", "completed"]


# --- the same edge as POST / ------------------------------------------------------------


def _counted(client: FlaskClient, method: str, outcome: str) -> float:
    text = client.get("/metrics").get_data(as_text=True)
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "toolnexus_requests_total"
        and sample.labels == {"method": method, "outcome": outcome}
    )


def test_calls_are_logged_and_counted_by_their_a2a_method(
    client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    before = _counted(client, "GetTask", "-32001"), _counted(client, "SendMessage", "ok")
    task_id = send(client)["task"]["id"]
    with caplog.at_level(logging.INFO, logger="web.requests"):
        missing = client.get("/tasks/no-such-task", headers={**V10, "X-Request-ID": "req-42"})
    assert missing.headers["X-Request-ID"] == "req-42"
    # Only this request's line: a server left by an earlier test in this
    # process may log through the same logger meanwhile.
    (line,) = [
        r.getMessage()
        for r in caplog.records
        if r.name == "web.requests" and "/tasks/no-such-task" in r.getMessage()
    ]
    assert line.startswith("GET /tasks/no-such-task GetTask dialect=http+json")
    assert "outcome=-32001 status=404" in line
    after = _counted(client, "GetTask", "-32001"), _counted(client, "SendMessage", "ok")
    assert (after[0] - before[0], after[1] - before[1]) == (1, 1)
    assert task_id


def test_browsers_get_cors_on_the_routes(store: MemoryStore) -> None:
    client = client_for(store, allowed_origins=("https://app.example",))
    origin = {"Origin": "https://app.example"}
    preflight = client.options(
        "/tasks/t-1/pushNotificationConfigs/c-1",
        headers={**origin, "Access-Control-Request-Method": "DELETE"},
    )
    assert preflight.status_code == 204
    assert "DELETE" in preflight.headers["Access-Control-Allow-Methods"]
    task_id = send(client)["task"]["id"]
    got = client.get(f"/tasks/{task_id}", headers={**V10, **origin})
    assert got.headers["Access-Control-Allow-Origin"] == "https://app.example"
    refusal(
        client.post("/message:send", json={}, headers={**V10, "Origin": "https://evil.example"}),
        403,
        "ORIGIN_NOT_ALLOWED",
    )


def test_a_store_fault_mid_stream_ends_it_with_an_error_event() -> None:
    wire = Wire(V10_SHAPES, None, 15.0, enveloped=False)

    def body(wire: Wire) -> Iterator[Any]:
        yield wire.result(1, {"task": {"id": "t-1"}})
        raise StoreError("connection refused at 10.0.0.7:6379")

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/tasks/t-1:subscribe"}
    request = WsgiRequest(environ)
    statuses: list[str] = []
    observed = begin(request, "/tasks/{id}:subscribe")
    try:
        chunks = open_stream(
            Stream(wire, "t-1", body),
            request,
            observed,
            lambda status, headers: statuses.append(status),
            HangupMonitor(),
            [],
        )
        sent = b"".join(chunks).decode()
    finally:
        observed.binding.release()  # as the endpoint does: no request id left bound
    assert statuses == ["200 OK"]
    first, error = [block for block in sent.split("\n\n") if block.startswith(("id:", "event:"))]
    assert first == 'id: 1\ndata: {"task":{"id":"t-1"}}'
    head, data = error.split("\n")
    assert head == "event: error"
    status = json.loads(data.removeprefix("data: "))["error"]
    assert (status["code"], status["details"][0]["reason"]) == (503, "STORE_UNAVAILABLE")
    assert "10.0.0.7" not in sent
