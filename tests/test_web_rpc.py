"""The JSON-RPC envelope, every error code, auth, the body limit and the
infrastructure faults: every reply JSON, never a stack trace."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import Settings, memory_store
from shared.errors import StoreError
from tests.support.strategies import json_values
from tests.test_web_support import PlayingDispatcher, live_server, rpc, user_message
from web import create_app
from web.core.errors import BAD_REQUEST, ERROR_INFO
from web.http.body import _plain_loads, _plainly_storable, _strict_loads
from web.jsonrpc.binding import METHODS


@pytest.fixture
def store() -> Any:
    return memory_store()


@pytest.fixture
def dispatcher(store: Any) -> PlayingDispatcher:
    return PlayingDispatcher(store, auto=False)


@pytest.fixture
def client(store: Any, dispatcher: PlayingDispatcher) -> FlaskClient:
    return create_app(Settings(), store=store, dispatcher=dispatcher).test_client()


def post_raw(client: FlaskClient, data: bytes, **headers: str) -> tuple[int, dict[str, Any]]:
    headers.setdefault("Content-Type", "application/json")
    response = client.post("/", data=data, headers=headers)
    assert response.mimetype == "application/json"
    return response.status_code, json.loads(response.data)


def error_of(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply["jsonrpc"] == "2.0"
    assert "result" not in reply
    error = reply["error"]
    assert isinstance(error, dict)
    return error


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask"',
        b"\xff\xfe{",
        b"",
        b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":NaN}}',
        b"[" * 100_000,
    ],
)
def test_unparsable_body_is_parse_error_with_null_id_and_http_200(
    client: FlaskClient, body: bytes
) -> None:
    status, reply = post_raw(client, body)
    assert status == 200
    assert reply["id"] is None
    assert error_of(reply)["code"] == -32700


@pytest.mark.parametrize(
    ("body", "echoed_id"),
    [
        ('"just a string"', None),
        ("42", None),
        ("[]", None),
        ('[{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}]', None),
        ('{"jsonrpc": "1.0", "id": 7, "method": "GetTask", "params": {"id": "x"}}', 7),
        ('{"id": "a", "method": "GetTask", "params": {"id": "x"}}', "a"),
        ('{"jsonrpc": "2.0", "id": true, "method": "GetTask"}', None),
        ('{"jsonrpc": "2.0", "id": {"x": 1}, "method": "GetTask"}', None),
        ('{"jsonrpc": "2.0", "id": [1], "method": "GetTask"}', None),
        ('{"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "x"}}', None),
        ('{"jsonrpc": "2.0", "id": 3}', 3),
        ('{"jsonrpc": "2.0", "id": 3, "method": 12}', 3),
    ],
)
def test_invalid_request_is_32600(client: FlaskClient, body: str, echoed_id: Any) -> None:
    status, reply = post_raw(client, body.encode())
    assert status == 200
    assert reply["id"] == echoed_id
    assert error_of(reply)["code"] == -32600


def test_unknown_method_is_32601(client: FlaskClient) -> None:
    error = error_of(rpc(client, "tasks/resubscribeX", {"id": "x"}, request_id="r1"))
    assert error["code"] == -32601
    assert "tasks/resubscribeX" in error["message"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        (None, "params"),
        ([1, 2], "params"),
        ({}, "message"),
        ({"message": "hello"}, "message"),
        ({"message": {"role": "user", "messageId": "m"}}, "message.parts"),
        ({"message": {"role": "user", "messageId": "m", "parts": []}}, "message.parts"),
        ({"message": {"role": "user", "messageId": "m", "parts": "hi"}}, "message.parts"),
        ({"message": {"messageId": "m", "parts": [{"kind": "text", "text": "x"}]}}, "message.role"),
        ({"message": {"role": "boss", "messageId": "m", "parts": [{"text": "x"}]}}, "message.role"),
        (
            {"message": {"role": "user", "parts": [{"kind": "text", "text": "x"}]}},
            "message.messageId",
        ),
        (
            {"message": {"role": "user", "messageId": 5, "parts": [{"text": "x"}]}},
            "message.messageId",
        ),
        (
            {"message": {"role": "user", "messageId": "m", "parts": [{"kind": "text", "text": 5}]}},
            "message.parts[0].text",
        ),
        (
            {"message": {"role": "user", "messageId": "m", "parts": [{"text": None}]}},
            "message.parts[0].text",
        ),
        ({"message": {"role": "user", "messageId": "m", "parts": ["hi"]}}, "message.parts[0]"),
        (
            {"message": {"role": "user", "messageId": "m", "parts": [{"kind": "video"}]}},
            "message.parts[0]",
        ),
        (
            {
                "message": {
                    "role": "user",
                    "messageId": "m",
                    "parts": [{"kind": "file", "file": {}}],
                }
            },
            "message.parts[0]",
        ),
        (
            {"message": user_message(), "configuration": {"blocking": "yes"}},
            "configuration.blocking",
        ),
        (
            {"message": user_message(), "configuration": {"historyLength": -1}},
            "configuration.historyLength",
        ),
        ({"message": user_message(taskId=7)}, "message.taskId"),
    ],
)
def test_bad_send_params_are_32602_naming_the_field(
    client: FlaskClient, dispatcher: PlayingDispatcher, params: Any, field: str
) -> None:
    for version in (None, "1.0"):
        error = error_of(rpc(client, "SendMessage", params, version=version))
        assert error["code"] == -32602
        assert field in error["message"]
        if version == "1.0":
            violations = [item for item in error["data"] if item["@type"] == BAD_REQUEST]
            assert violations[0]["fieldViolations"][0]["field"] == field
        else:
            assert error["data"]["field"] == field
    assert dispatcher.enqueued == []


def test_a_part_of_unknown_kind_is_named_for_what_it_is(client: FlaskClient) -> None:
    bogus = {"role": "user", "messageId": "m", "parts": [{"kind": "bogus", "text": "x"}]}
    error = error_of(rpc(client, "SendMessage", {"message": bogus}))
    assert error["code"] == -32602
    assert "unknown kind 'bogus'" in error["message"]
    empty = {"role": "user", "messageId": "m", "parts": [{"note": "x"}]}
    assert "has no text" in error_of(rpc(client, "SendMessage", {"message": empty}))["message"]


@pytest.mark.parametrize("method", ["GetTask", "tasks/get", "CancelTask", "tasks/cancel"])
@pytest.mark.parametrize("params", [None, {}, {"id": 5}, {"id": ""}, {"id": ["a"]}])
def test_bad_task_id_params_are_32602(client: FlaskClient, method: str, params: Any) -> None:
    assert error_of(rpc(client, method, params))["code"] == -32602


def test_non_integer_history_length_is_32602(client: FlaskClient) -> None:
    error = error_of(rpc(client, "GetTask", {"id": "x", "historyLength": "2"}))
    assert error["code"] == -32602


def test_unsupported_version_is_32009_with_error_info(client: FlaskClient) -> None:
    reply = rpc(client, "GetTask", {"id": "x"}, version="0.5", request_id=9)
    error = error_of(reply)
    assert reply["id"] == 9
    assert error["code"] == -32009
    assert "0.5" in error["message"]


def test_errors_in_1_0_carry_error_info_data(client: FlaskClient) -> None:
    error = error_of(rpc(client, "GetTask", {"id": "no-such-task"}, version="1.0"))
    assert error["code"] == -32001
    info = error["data"][0]
    assert info["@type"] == ERROR_INFO
    assert info["reason"] == "TASK_NOT_FOUND"
    assert info["domain"] == "a2a-protocol.org"
    assert info["metadata"] == {"taskId": "no-such-task"}


def test_errors_in_0_3_have_plain_data(client: FlaskClient) -> None:
    error = error_of(rpc(client, "tasks/get", {"id": "no-such-task"}))
    assert error["code"] == -32001
    assert error["data"] == {"taskId": "no-such-task"}


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
def test_a_body_not_sent_as_json_is_32005(
    client: FlaskClient, dispatcher: PlayingDispatcher, content_type: str | None
) -> None:
    """What a web page can send without asking (a form, text/plain) is refused,
    so a browser cannot drive the agent; the A2A error for it is -32005."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": user_message()}}
    )
    headers = {"Content-Type": content_type} if content_type else {}
    response = client.post("/", data=body, headers=headers)
    assert (response.status_code, response.mimetype) == (200, "application/json")
    error = error_of(response.get_json())
    assert error["code"] == -32005
    assert "application/json" in error["message"]
    assert dispatcher.enqueued == []


@pytest.mark.parametrize(
    "content_type", ["application/json; charset=utf-8", "application/a2a+json"]
)
def test_json_content_types_are_accepted(client: FlaskClient, content_type: str) -> None:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": user_message()}}
    )
    status, reply = post_raw(client, body.encode(), **{"Content-Type": content_type})
    assert status == 200
    assert reply["result"]["status"]["state"] == "submitted"


class FailingStore:
    """A store whose backend is down, or broken in an unexpected way."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def get(self, task_id: str) -> Any:
        raise self.error

    def save(self, task: Any) -> Any:
        raise self.error


SECRET = "redis://10.0.0.9:6379 refused"


@pytest.mark.parametrize("method", ["SendMessage", "GetTask", "CancelTask", "message/send"])
def test_store_down_says_task_store_unavailable_and_leaks_nothing(method: str) -> None:
    store = FailingStore(StoreError(f"task store unavailable: {SECRET}"))
    dispatcher = PlayingDispatcher(memory_store())
    client = create_app(Settings(), store=store, dispatcher=dispatcher).test_client()
    params = {"message": user_message(), "id": "t-1"}
    for _ in range(2):  # the process keeps serving
        error = error_of(rpc(client, method, params))
        assert error["code"] == -32603
        assert error["message"] == "task store unavailable"
        assert SECRET not in json.dumps(error)
    assert dispatcher.enqueued == []
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.get_json() == {"status": "unavailable", "store": "task store unavailable"}


def test_unexpected_error_is_32603_without_a_trace() -> None:
    store = FailingStore(RuntimeError("kaboom in line 42"))
    client = create_app(Settings(), store=store, dispatcher=PlayingDispatcher(store)).test_client()
    error = error_of(rpc(client, "GetTask", {"id": "t-1"}))
    assert error == {"code": -32603, "message": "internal error"}


def test_http_errors_elsewhere_are_json(client: FlaskClient) -> None:
    missing = client.get("/no/such/page")
    assert (missing.status_code, missing.mimetype) == (404, "application/json")
    assert missing.get_json()["error"]["code"] == 404
    wrong_verb = client.put("/")
    assert (wrong_verb.status_code, wrong_verb.mimetype) == (405, "application/json")
    wrong_verb = client.delete("/.well-known/agent-card.json")
    assert wrong_verb.status_code == 405
    assert wrong_verb.get_json()["error"]["code"] == 405


def test_a_wrong_verb_is_told_every_verb_the_path_serves(store: Any) -> None:
    """Over real HTTP: `PUT /` is told POST too (the JSON-RPC endpoint, which
    Flask does not route), in the same order every time."""
    app = create_app(Settings(), store=store, dispatcher=PlayingDispatcher(store))
    with live_server(app) as (url, _):
        endpoint = requests.put(f"{url}/", timeout=10)
        probe = requests.post(f"{url}/healthz", timeout=10)
    assert (endpoint.status_code, endpoint.headers["Allow"]) == (405, "GET, HEAD, OPTIONS, POST")
    assert endpoint.json()["error"]["details"][0]["reason"] == "METHOD_NOT_ALLOWED"
    assert (probe.status_code, probe.headers["Allow"]) == (405, "GET, HEAD, OPTIONS")


def test_an_unhandled_route_error_is_a_json_500(store: Any) -> None:
    app = create_app(Settings(), store=store, dispatcher=PlayingDispatcher(store))

    def explode() -> str:
        raise RuntimeError("secret detail")

    app.add_url_rule("/explode", view_func=explode)
    response = app.test_client().get("/explode")
    assert (response.status_code, response.mimetype) == (500, "application/json")
    assert b"secret detail" not in response.data
    assert b"Traceback" not in response.data


def test_body_over_the_limit_gets_a_clear_json_rpc_error(store: Any) -> None:
    settings = Settings(max_body=2000)
    client = create_app(settings, store=store, dispatcher=PlayingDispatcher(store)).test_client()
    message = user_message("x" * 1500)
    small = rpc(client, "SendMessage", {"message": message})
    assert small["result"]["status"]["state"] == "submitted"
    big = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {"message": user_message("x" * 2500)},
        }
    )
    status, reply = post_raw(client, big.encode())
    assert status == 413
    error = error_of(reply)
    assert error["code"] == -32600
    assert "too large" in error["message"] and "2000" in error["message"]


class TestAuth:
    TOKENS = ("alpha-token", "beta-token")

    @pytest.fixture
    def client(self, store: Any) -> FlaskClient:
        settings = Settings(api_tokens=self.TOKENS)
        return create_app(settings, store=store, dispatcher=PlayingDispatcher(store)).test_client()

    @pytest.mark.parametrize(
        "authorization", [None, "", "Bearer", "Bearer wrong", "Basic alpha-token", "alpha-token"]
    )
    def test_post_without_a_valid_token_is_401_json_rpc(
        self, client: FlaskClient, authorization: str | None
    ) -> None:
        headers = {"Authorization": authorization} if authorization is not None else {}
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": user_message()},
            }
        )
        headers["Content-Type"] = "application/json"
        response = client.post("/", data=body, headers=headers)
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert error_of(response.get_json())["code"] == -32000

    @pytest.mark.parametrize("token", TOKENS)
    def test_each_configured_token_is_accepted(self, client: FlaskClient, token: str) -> None:
        reply = rpc(
            client,
            "SendMessage",
            {"message": user_message()},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert reply["result"]["status"]["state"] == "submitted"

    def test_card_and_health_stay_public_and_card_declares_the_scheme(
        self, client: FlaskClient
    ) -> None:
        card = client.get("/.well-known/agent-card.json").get_json()
        scheme = card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]
        assert scheme["scheme"] == "bearer"
        assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]
        legacy = client.get("/.well-known/agent-card.json", headers={"A2A-Version": "0.3"})
        assert legacy.get_json()["securitySchemes"]["bearer"]["scheme"] == "bearer"
        assert legacy.get_json()["security"] == [{"bearer": []}]
        assert client.get("/healthz").status_code == 200


def test_health_endpoints(client: FlaskClient, dispatcher: PlayingDispatcher, store: Any) -> None:
    assert client.get("/healthz").get_json() == {"status": "ok"}
    store.record_beat()  # what the reaper does on each run
    ready = client.get("/readyz")
    assert (ready.status_code, ready.get_json()["status"]) == (200, "ready")
    dispatcher.broken = True
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.get_json() == {"status": "unavailable", "broker": "broker unavailable"}
    assert client.get("/healthz").status_code == 200


JSON = json_values(max_leaves=20, key_size=12)
FIELDS = st.sampled_from(
    [
        "message",
        "id",
        "configuration",
        "historyLength",
        "pageSize",
        "pageToken",
        "status",
        "contextId",
        "includeArtifacts",
    ]
)
# The streaming methods answer with a stream that lasts as long as the task;
# tests/test_web_streaming.py covers them.
STREAMING = {"SendStreamingMessage", "message/stream", "SubscribeToTask", "tasks/resubscribe"}
METHOD_NAMES = st.sampled_from([*sorted(set(METHODS) - STREAMING), "nope"])


@settings(
    max_examples=300,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=METHOD_NAMES,
    params=st.dictionaries(FIELDS, JSON, max_size=4) | JSON,
    message=st.dictionaries(
        st.sampled_from(["role", "messageId", "parts", "taskId", "contextId"]), JSON, max_size=5
    ),
    version=st.sampled_from([None, "0.3", "1.0", "9"]),
)
def test_generated_requests_always_get_a_json_rpc_reply(
    client: FlaskClient, method: str, params: Any, message: Any, version: str | None
) -> None:
    if isinstance(params, dict) and "message" in params and not params["message"]:
        params["message"] = message
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    headers = {"A2A-Version": version} if version else {}
    status, reply = post_raw(client, body.encode(), **headers)
    assert status == 200
    assert reply["jsonrpc"] == "2.0" and reply["id"] == 1
    assert ("result" in reply) != ("error" in reply)
    if "error" in reply:
        assert reply["error"]["code"] != -32603, reply


# The envelope is read by orjson when the body is plainly storable, by the
# standard library otherwise; both must give the same answer, value or error.
JSON_TOKENS = st.sampled_from(
    ["0", "1", "-", ".", "e", "E", "+", '"a"', '"', "{", "}", "[", "]", ",", ":", " ", "\n",
     "true", "false", "null", "NaN", "Infinity", "1e400", "-1e309", "00", "1.", ".5", "-0",
     "123456789012345678", "99999999999999999999", "\\", '"\\n"', '"\\x"', "\x00", "\x7f"]
)  # fmt: skip


def read_by(reader: Any, body: bytes) -> tuple[str, str]:
    """What a reader made of `body`: its value (repr: -0.0 is not 0.0), or its error."""
    try:
        return "value", repr(reader(body))
    except ValueError as error:
        return "error", str(error)


@settings(max_examples=3000, suppress_health_check=[HealthCheck.too_slow])
@given(
    text=st.one_of(
        st.lists(JSON_TOKENS, max_size=10).map("".join),
        json_values().map(json.dumps),
        st.floats(allow_nan=False).map(lambda number: f'{{"a":[{number!r}]}}'),
    )
)
def test_plain_bodies_read_as_the_standard_library_reads_them(text: str) -> None:
    body = text.encode()
    if _plainly_storable(body):
        assert read_by(_plain_loads, body) == read_by(_strict_loads, body)
