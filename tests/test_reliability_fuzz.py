"""Reliability scenario 3 (issue 6): fuzzed input at `POST /`.

Thousands of generated bodies (random JSON, valid envelopes with wrong types
in every field, huge strings, deep nesting, invalid UTF-8, wrong content
types) in all three dialects, through the Flask test client and once more
over real HTTP. Every reply must be a valid JSON-RPC 2.0 response and never
an HTTP 5xx; afterwards the app still serves a SendMessage + GetTask round
trip and every stored task is whole and can still be fulfilled. Hostile task
ids against the file store must touch nothing outside its directory.

Figures are printed (see them with `pytest -s`).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import hashlib
import http.client
import json
import logging
import math
import os
import sys
import threading
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from a2a import types as sdk
from a2a.compat.v0_3 import types as sdk_v03
from flask import Flask
from flask.testing import FlaskClient
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.serving import make_server

from shared import Settings
from shared.events import to_state
from shared.store.contract import is_safe_id
from shared.stores.file.store import FileStore
from shared.task import COMPLETED, STATES, WORKING, is_terminal, state_of
from shared.transitions import transition
from tests.support.redis_server import free_port
from tests.support.store_kinds import Stores
from tests.support.strategies import json_values
from web import create_app
from web.core.errors import ERROR_INFO
from web.core.params import MAX_VALUE_DEPTH
from web.http.body import MAX_DEPTH
from web.jsonrpc.binding import METHODS

MAX_BODY = 16 * 1024  # small, so "beyond the limit" stays cheap
FUZZ = settings(
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,  # one app per test, shared by its examples
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)


def fuzz(examples: int) -> settings:
    return settings(FUZZ, max_examples=examples)


ANY_ID = object()  # the request id could not be known: any valid id or null will do
# The longest error reply, request id aside (-32601 lists the known methods;
# task ids are at most 128 characters and appear at most three times).
MAX_ERROR_REPLY = 2048
VERSIONS = [
    None,
    "0.3",
    "1.0",
    "0.3.0",
    "1.0.0",
    " 1.0 ",
    "1.1",
    "2.0",
    "0",
    "abc",
    "",
    " ",
    "1.0\xe9",
]
VERSION = st.sampled_from(VERSIONS) | st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12
)
CONTENT_TYPES = [
    "",  # none at all
    "application/json",
    "application/a2a+json",
    "application/json; charset=utf-8",
    "application/json; charset=latin-1",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=xyz",
    "multipart/form-data",
    "application/octet-stream",
    "%%garbage%%",
]


# --- the app under fuzz ------------------------------------------------------


class RecordingDispatcher:
    """Queues nothing; remembers what web asked it to enqueue."""

    def __init__(self) -> None:
        self.enqueued: list[str] = []
        self.revoked: list[str] = []

    def enqueue(self, task_id: str) -> None:
        self.enqueued.append(task_id)

    def revoke(self, task_id: str) -> None:
        self.revoked.append(task_id)

    def check(self) -> None:
        pass


@dataclass
class Tally:
    """What one test sent and heard back."""

    name: str
    sent: int = 0
    codes: Counter[str] = field(default_factory=Counter)
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: int = 0
    invalid: int = 0

    def report(self) -> None:
        print(f"\n[fuzz] {self.name}: {self.figures()}")
        TOTAL.sent += self.sent
        TOTAL.codes.update(self.codes)
        TOTAL.statuses.update(self.statuses)
        TOTAL.server_errors += self.server_errors
        TOTAL.invalid += self.invalid

    def figures(self) -> str:
        codes = ", ".join(f"{code}: {count}" for code, count in sorted(self.codes.items()))
        return (
            f"{self.sent} bodies sent; HTTP statuses {dict(sorted(self.statuses.items()))};"
            f" replies by code {{{codes}}}; 5xx: {self.server_errors};"
            f" invalid replies: {self.invalid}"
        )


TOTAL = Tally("all fuzz tests")


@pytest.fixture(scope="module", autouse=True)
def _print_totals() -> Iterator[None]:
    yield
    print(f"\n[fuzz] TOTAL over the module: {TOTAL.figures()}")


@dataclass
class Target:
    """One app (file store, recording dispatcher) and a way to post to it."""

    app: Flask
    store: FileStore
    dispatcher: RecordingDispatcher
    tally: Tally
    post: Callable[[bytes, dict[str, str]], tuple[int, str, bytes]] = field(init=False)
    _known_task: str | None = None

    def __post_init__(self) -> None:
        client = self.app.test_client()
        self.post = lambda body, headers: _post_client(client, body, headers)

    def known_task(self) -> str:
        """The id of a task that exists (saved on first use)."""
        if self._known_task is None:
            send = request("SendMessage", {"message": user_message()})
            _, reply = self.reply(encode(send))
            self._known_task = str(reply["result"]["id"])
        return self._known_task

    def send(self, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        status, mimetype, data = self.post(body, headers or {})
        self.tally.sent += 1
        self.tally.statuses[status] += 1
        if status >= 500:
            self.tally.server_errors += 1
            raise AssertionError(f"HTTP {status}: {data[:300]!r}")
        assert mimetype.startswith("application/json"), (status, mimetype, data[:200])
        return status, data

    def reply(
        self, body: bytes, headers: dict[str, str] | None = None, *, request_id: object = ANY_ID
    ) -> tuple[int, dict[str, Any]]:
        """Post `body`; check the reply is valid JSON-RPC 2.0 and return it."""
        status, data = self.send(body, headers)
        try:
            reply = valid_response(data, request_id)
        except AssertionError:
            self.tally.invalid += 1
            raise
        self.tally.codes[str(reply["error"]["code"]) if "error" in reply else "result"] += 1
        return status, reply


def _post_client(
    client: FlaskClient, body: bytes, headers: dict[str, str]
) -> tuple[int, str, bytes]:
    sent = {"Content-Type": "application/json", **headers}
    if not sent["Content-Type"]:
        del sent["Content-Type"]  # "" stands for a request without one
    query = {}
    if "?A2A-Version" in sent:
        query["A2A-Version"] = sent.pop("?A2A-Version")
    response = client.post("/", data=body, headers=sent, query_string=query)
    return response.status_code, response.mimetype, response.data


def make_target(directory: Path, name: str) -> Target:
    store = FileStore(directory)
    dispatcher = RecordingDispatcher()
    # No worker runs: an A2A send that blocks by default comes back at once.
    app = create_app(
        Settings(max_body=MAX_BODY, blocking_timeout=0.001), store=store, dispatcher=dispatcher
    )
    return Target(app, store, dispatcher, Tally(name))


@pytest.fixture
def target(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Target]:
    """An app on a file store; after the test's examples it must still serve
    and its store must be whole."""
    fuzzed = make_target(tmp_path / "store", request.node.name)
    yield fuzzed
    try:
        finish(fuzzed)
    finally:
        fuzzed.tally.report()


# --- what every reply must be --------------------------------------------------


def _no_constants(name: str) -> Any:
    raise AssertionError(f"{name} in a reply is not JSON")


def strict_json(data: bytes) -> Any:
    """RFC 8259 JSON: UTF-8, no NaN/Infinity, no overflowing numbers."""

    def finite(text: str) -> float:
        number = float(text)
        assert math.isfinite(number), f"{text} in a reply is not a finite number"
        return number

    return json.loads(data.decode("utf-8"), parse_constant=_no_constants, parse_float=finite)


def is_valid_id(value: object) -> bool:
    return value is None or (isinstance(value, str | int | float) and not isinstance(value, bool))


def valid_response(data: bytes, request_id: object) -> dict[str, Any]:
    """`data` is one JSON-RPC 2.0 response object; its id echoes `request_id`
    (None: the request had no valid id; ANY_ID: unknown to the caller)."""
    reply = strict_json(data)
    assert isinstance(reply, dict), reply
    assert reply.get("jsonrpc") == "2.0", reply
    assert set(reply) in ({"jsonrpc", "id", "result"}, {"jsonrpc", "id", "error"}), sorted(reply)
    if request_id is ANY_ID:
        assert is_valid_id(reply["id"]), reply["id"]
    else:
        assert reply["id"] == request_id and type(reply["id"]) is type(request_id), (
            reply["id"],
            request_id,
        )
    if "error" in reply:
        error = reply["error"]
        assert isinstance(error, dict), error
        assert type(error["code"]) is int, error
        assert isinstance(error["message"], str) and error["message"], error
        # Echoed ids and values are cut short: an error never grows with the input.
        assert len(data) <= MAX_ERROR_REPLY + len(json.dumps(reply["id"])), len(data)
    return reply


def code_of(reply: dict[str, Any]) -> int | None:
    return reply["error"]["code"] if "error" in reply else None


def id_of(envelope: object) -> object:
    """The id a reply must echo: the request's when it is a valid one, else null."""
    if isinstance(envelope, dict) and is_valid_id(envelope.get("id")) and "id" in envelope:
        return envelope["id"]
    return None


def dialect_headers(version: str | None, *, in_query: bool = False) -> dict[str, str]:
    if version is None:
        return {}
    return {"?A2A-Version" if in_query else "A2A-Version": version}


def check_store_whole(target: Target) -> None:
    """No task half-written, none lost, and each can still be fulfilled."""
    tasks = target.store.all()
    for task_id, task in tasks.items():
        assert isinstance(task, dict) and task.get("id") == task_id, task_id
        assert state_of(task) in STATES, task.get("status")
        assert isinstance(task["status"].get("timestamp"), str), task["status"]
    if isinstance(target.store, FileStore):
        assert not [name for name in os.listdir(target.store.directory) if name.endswith(".tmp")]
    for task_id in target.dispatcher.enqueued:
        assert task_id in tasks, f"task {task_id} was handed out but never saved"
        # What a worker does first and last: both must still be possible.
        worked = transition(target.store, task_id, to_state(WORKING))
        assert worked.applied or is_terminal(state_of(tasks[task_id])), task_id
        done = transition(target.store, task_id, to_state(COMPLETED))
        assert done.task is not None and is_terminal(state_of(done.task)), task_id


def check_still_serving(target: Target) -> None:
    send = request("SendMessage", {"message": user_message("after the storm")}, request_id="rt-1")
    status, reply = target.reply(encode(send), request_id="rt-1")
    assert status == 200 and "result" in reply, reply
    task_id = reply["result"]["id"]
    get = request("GetTask", {"id": task_id}, request_id="rt-2")
    status, reply = target.reply(encode(get), request_id="rt-2")
    assert status == 200 and reply["result"]["id"] == task_id, reply
    assert reply["result"]["history"][0]["parts"][0]["text"] == "after the storm"
    assert target.dispatcher.enqueued[-1] == task_id


def check_every_sdk_reads_every_task(target: Target) -> None:
    """What one client stored, every other client's SDK can read: each task
    as GetTask returns it in 1.0 parses as the a2a-sdk's Task (protobuf) and
    in 0.3 as its 0.3 Task, and a 1.0 ListTasks page parses too."""
    for task_id in target.store.all():
        for version in ("1.0", "0.3"):
            get = encode(request("GetTask", {"id": task_id}, request_id="sdk"))
            _, reply = target.reply(get, {"A2A-Version": version}, request_id="sdk")
            if version == "1.0":
                json_format.ParseDict(reply["result"], sdk.Task())
            else:
                sdk_v03.Task.model_validate(reply["result"])
    listing = encode(request("ListTasks", {"pageSize": 100, "includeArtifacts": True}))
    _, reply = target.reply(listing, {"A2A-Version": "1.0"}, request_id=1)
    json_format.ParseDict(reply["result"], sdk.ListTasksResponse())


def finish(target: Target) -> None:
    check_still_serving(target)
    check_store_whole(target)
    check_every_sdk_reads_every_task(target)


# --- requests ------------------------------------------------------------------


def encode(value: Any) -> bytes:
    return json.dumps(value).encode()


def request(method: str, params: Any = None, *, request_id: Any = 1) -> dict[str, Any]:
    envelope: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        envelope["params"] = params
    return envelope


def user_message(text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "user",
        "messageId": f"m-{uuid.uuid4()}",
        "parts": [{"kind": "text", "text": text}],
        **extra,
    }


JSON = json_values(max_leaves=10, key_size=8)
ODD = st.sampled_from(
    [
        None, True, False, 0, -1, 2**63, -(2**63) - 1, 10**30, 1.5, -0.0, 1e308, "", " ", "\x00",
        "../x", "user", "ROLE_USER", "agent", "text", "file", "data", "x" * 5000, "\u202e", [], {},
        [[]], {"": None}, [None], {"kind": "text"}, {"text": None}, {"file": {}}, {"url": 1},
    ]
)  # fmt: skip
WRONG = ODD | JSON

SEND_PATHS: list[tuple[Any, ...]] = [
    ("params", "message"),
    ("params", "message", "role"),
    ("params", "message", "parts"),
    ("params", "message", "parts", 0),
    ("params", "message", "parts", 0, "kind"),
    ("params", "message", "parts", 0, "text"),
    ("params", "message", "parts", 0, "file"),
    ("params", "message", "parts", 0, "file", "uri"),
    ("params", "message", "parts", 0, "file", "bytes"),
    ("params", "message", "parts", 0, "data"),
    ("params", "message", "parts", 0, "url"),
    ("params", "message", "parts", 0, "raw"),
    ("params", "message", "parts", 0, "mediaType"),
    ("params", "message", "parts", 0, "filename"),
    ("params", "message", "parts", 0, "file", "name"),
    ("params", "message", "parts", 0, "file", "mimeType"),
    ("params", "message", "parts", 0, "metadata"),
    ("params", "message", "parts", 0, "metadata", "key"),
    ("params", "message", "parts", 1),
    ("params", "message", "messageId"),
    ("params", "message", "taskId"),
    ("params", "message", "contextId"),
    ("params", "message", "metadata"),
    ("params", "message", "metadata", "key"),
    ("params", "message", "extensions"),
    ("params", "message", "extensions", 0),
    ("params", "message", "extensions", 1),
    ("params", "message", "referenceTaskIds"),
    ("params", "message", "referenceTaskIds", 0),
    ("params", "message", "referenceTaskIds", 1),
    ("params", "message", "kind"),
    ("params", "configuration"),
    ("params", "configuration", "blocking"),
    ("params", "configuration", "returnImmediately"),
    ("params", "configuration", "historyLength"),
    ("params", "configuration", "acceptedOutputModes"),
    ("params", "configuration", "pushNotificationConfig"),
    ("params", "metadata"),
]
GET_PATHS: list[tuple[Any, ...]] = [
    ("params", "id"),
    ("params", "historyLength"),
    ("params", "metadata"),
]
LIST_PATHS: list[tuple[Any, ...]] = [
    ("params", "contextId"),
    ("params", "status"),
    ("params", "pageSize"),
    ("params", "pageToken"),
    ("params", "historyLength"),
    ("params", "statusTimestampAfter"),
    ("params", "includeArtifacts"),
]
ENVELOPE_PATHS: list[tuple[Any, ...]] = [("id",), ("jsonrpc",), ("method",), ("params",)]
DELETE = object()


def base_request(method: str, known_task: str, part: dict[str, Any]) -> dict[str, Any]:
    """A valid request for `method`, for the mutations to break."""
    if method in ("SendMessage", "message/send"):
        message = {
            **user_message(),
            "parts": [{**part, "metadata": {"key": "value"}}],
            "contextId": "ctx-1",
            "metadata": {"key": "value"},
            "extensions": ["https://example.com/ext/1"],
            "referenceTaskIds": ["task-1"],
        }
        configuration = {"blocking": False, "historyLength": 2, "acceptedOutputModes": []}
        return request(method, {"message": message, "configuration": configuration})
    if method in ("ListTasks", "tasks/list"):
        return request(method, {"pageSize": 5, "contextId": "ctx-1"})
    return request(method, {"id": known_task, "historyLength": 1})


def paths_for(method: str) -> list[tuple[Any, ...]]:
    own = {
        "SendMessage": SEND_PATHS,
        "message/send": SEND_PATHS,
        "ListTasks": LIST_PATHS,
        "tasks/list": LIST_PATHS,
    }.get(method, GET_PATHS)
    return ENVELOPE_PATHS + own


def mutate(envelope: Any, path: tuple[Any, ...], value: Any) -> None:
    """Set (or with DELETE remove) the value at `path`, if the way there is
    still there. A copy goes in: sampled values are shared between examples."""
    value = value if value is DELETE else copy.deepcopy(value)
    holder = envelope
    for step in path[:-1]:
        present = (
            step in holder
            if isinstance(holder, dict)
            else (isinstance(holder, list) and isinstance(step, int) and step < len(holder))
        )
        if not present:
            return
        holder = holder[step]
    last = path[-1]
    if isinstance(holder, dict):
        if value is DELETE:
            holder.pop(last, None)
        else:
            holder[last] = value
    elif isinstance(holder, list) and isinstance(last, int):
        if value is DELETE:
            del holder[last : last + 1]
        elif last < len(holder):
            holder[last] = value
        else:
            holder.append(value)


PARTS = st.sampled_from(
    [
        {"kind": "text", "text": "hi"},
        {"text": "hi"},
        {"kind": "data", "data": {"a": [1, 2]}},
        {"data": None},
        {"kind": "file", "file": {"uri": "https://example.com/f", "mimeType": "text/plain"}},
        {"kind": "file", "file": {"bytes": "aGk=", "name": "f"}},
        {"url": "https://example.com/f", "mediaType": "text/plain"},
        {"raw": "aGk=", "filename": "f"},
    ]
)
# A valid streaming request answers with a stream as long as its task (none
# runs here): tests/test_web_streaming.py covers those methods.
STREAMING = {"SendStreamingMessage", "message/stream", "SubscribeToTask", "tasks/resubscribe"}
METHOD = st.sampled_from(sorted(set(METHODS) - STREAMING))


def check_result_task(target: Target, reply: dict[str, Any]) -> None:
    """A successful reply carries a task that is really in the store (or
    concerns one: the push-notification config methods)."""
    result = reply["result"]
    if result is None or result == {}:  # a deleted push config (0.3, 1.0)
        return
    if isinstance(result, list) or "configs" in result:  # listed push configs (0.3, 1.0)
        configs = result if isinstance(result, list) else result["configs"]
        assert all(target.store.get(config["taskId"]) is not None for config in configs)
        return
    assert isinstance(result, dict), result
    if "url" in result.get("pushNotificationConfig", result):  # one push config
        assert target.store.get(result["taskId"]) is not None, result
        return
    task = result.get("task", result)
    if "tasks" in result:  # ListTasks
        assert isinstance(result["tasks"], list)
        return
    assert isinstance(task.get("id"), str) and target.store.get(task["id"]) is not None, task


# --- the fuzz tests --------------------------------------------------------------


# Half-right envelopes: each member may be there, right or any JSON at all.
ENVELOPES = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0") | JSON, "id": st.integers() | st.text(max_size=8) | JSON},
    optional={"method": METHOD | METHOD | JSON, "params": JSON, "": JSON},
)


@fuzz(600)
@given(value=JSON | ENVELOPES)
def test_random_json_values(target: Target, value: Any) -> None:
    """Any JSON value at all: a reply for each, never a 5xx, never -32700."""
    status, reply = target.reply(encode(value), request_id=id_of(value))
    assert status == 200
    assert code_of(reply) not in (-32700, -32603), reply
    if "result" in reply:
        check_result_task(target, reply)


@fuzz(700)
@given(
    data=st.data(),
    method=METHOD,
    part=PARTS,
    version=VERSION,
    in_query=st.booleans(),
)
def test_wrong_types_in_every_field(
    target: Target,
    data: st.DataObject,
    method: str,
    part: dict[str, Any],
    version: str,
    in_query: bool,
) -> None:
    """A valid request per method with one to three fields replaced by any
    JSON value (or removed), sent in each dialect and under a drawn version:
    -32600/-32601/-32602/-32001/-32009... or a result, never -32603 (a bad
    request is never an internal error) and never -32700."""
    envelope = base_request(method, target.known_task(), copy.deepcopy(part))
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        path = data.draw(st.sampled_from(paths_for(method)), label="path")
        value = data.draw(st.just(DELETE) | WRONG, label="value")
        mutate(envelope, path, value)
    body = encode(envelope)
    for dialect in (None, "0.3", "1.0", version):
        headers = dialect_headers(dialect, in_query=in_query)
        status, reply = target.reply(body, headers, request_id=id_of(envelope))
        assert status == 200
        assert code_of(reply) not in (-32700, -32603), (envelope, reply)
        if "result" in reply:
            check_result_task(target, reply)
        if "id" not in envelope:  # a notification: errors as for a request, else -32600
            assert code_of(reply) in (-32600, -32601, -32602, -32009), reply
        elif not is_valid_id(envelope["id"]):
            assert code_of(reply) == -32600, reply


FILLER = st.sampled_from(["x", "é", "\n", "\\", '"', "日"])
HUGE_FIELDS = ["text", "messageId", "method", "id", "taskId", "version key"]


@fuzz(200)
@given(
    size=st.integers(0, 2 * MAX_BODY) | st.integers(MAX_BODY - 64, MAX_BODY + 64),
    scale=st.sampled_from([1, 1, 1, 10, 100]),
    filler=FILLER,
    where=st.sampled_from(HUGE_FIELDS),
    version=st.sampled_from([None, "0.3", "1.0"]),
)
def test_huge_strings(
    target: Target, size: int, scale: int, filler: str, where: str, version: str | None
) -> None:
    """Strings up to and far beyond the body limit, in any field: over the
    limit is HTTP 413 with -32600 and a null id; under it a normal reply."""
    huge = filler * (size * scale // len(filler.encode()))
    message = user_message()
    envelope = request("SendMessage", {"message": message, "configuration": {"blocking": False}})
    if where == "text":
        message["parts"][0]["text"] = huge
    elif where == "messageId":
        message["messageId"] = huge
    elif where == "taskId":
        message["taskId"] = huge
    elif where == "version key":
        envelope["params"][huge] = 1
    else:
        envelope[where] = huge
    body = encode(envelope)
    too_large = len(body) > MAX_BODY
    status, reply = target.reply(body, dialect_headers(version), request_id=ANY_ID)
    if too_large:
        assert status == 413 and code_of(reply) == -32600 and reply["id"] is None, reply
    else:
        assert status == 200 and reply["id"] == id_of(envelope), reply
        assert code_of(reply) != -32603, reply
        if where == "taskId" and huge:
            # No such task (or no possible one): nothing was created.
            assert code_of(reply) == (-32001 if is_safe_id(huge) else -32602), reply
        if where in ("text", "version key"):
            assert "result" in reply, reply


def nested(shape: str, depth: int, closed: bool) -> str:
    """`depth` containers inside each other: [[[..]]], {"a":{"a":..}} or both."""
    opens = []
    for level in range(depth):
        array = shape == "[" or (shape == "mixed" and level % 2 == 0)
        opens.append("[" if array else '{"a":')
    closers = "".join("]" if opener == "[" else "}" for opener in reversed(opens))
    return "".join(opens) + "1" + (closers if closed else "")


# Where the nested value (@) goes, and how many containers enclose it there.
NEST_SITES = {
    "top": ("@", 0),
    "params": ('{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":@}', 1),
    "data part": (
        '{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{"message":{"role":"user",'
        '"messageId":"m","parts":[{"kind":"data","data":@}]}}}',
        5,
    ),
    "metadata": (
        '{"jsonrpc":"2.0","id":7,"method":"SendMessage","params":{"message":{"role":"user",'
        '"messageId":"m","parts":[{"text":"t"}],"metadata":@}}}',
        3,
    ),
    "task id": ('{"jsonrpc":"2.0","id":7,"method":"GetTask","params":{"id":@}}', 2),
}


@fuzz(400)
@given(
    depth=st.integers(1, 5000)
    | st.integers(MAX_DEPTH - 8, MAX_DEPTH + 8)
    | st.integers(MAX_VALUE_DEPTH - 3, MAX_VALUE_DEPTH + 3),
    shape=st.sampled_from(["[", "{", "mixed"]),
    closed=st.booleans(),
    site=st.sampled_from(sorted(NEST_SITES)),
    version=st.sampled_from([None, "0.3", "1.0"]),
)
def test_deep_nesting(
    target: Target, depth: int, shape: str, closed: bool, site: str, version: str | None
) -> None:
    """Thousands of levels of [ or {: a parse error (-32700, null id) beyond
    MAX_DEPTH or when unclosed; below it the request is served, and a task
    holding such data can still be fulfilled (see `check_store_whole`)."""
    template, enclosing = NEST_SITES[site]
    body = template.replace("@", nested(shape, depth, closed))
    status, reply = target.reply(body.encode(), dialect_headers(version), request_id=ANY_ID)
    if len(body) > MAX_BODY:
        assert status == 413 and code_of(reply) == -32600, reply
        return
    assert status == 200
    if not closed or enclosing + depth > MAX_DEPTH:
        assert code_of(reply) == -32700 and reply["id"] is None, reply
        return
    assert code_of(reply) not in (-32700, -32603), reply
    if site == "metadata" and shape != "{":
        assert code_of(reply) == -32602, reply  # metadata is an object, never a list
    elif site in ("data part", "metadata") and depth > MAX_VALUE_DEPTH:
        # Stored, it would break other clients' SDKs (see web.core.params.MAX_VALUE_DEPTH).
        assert code_of(reply) == -32602 and "nested deeper" in reply["error"]["message"], reply
    elif site in ("data part", "metadata"):
        assert reply["id"] == 7 and "result" in reply, reply
        check_result_task(target, reply)
    elif site == "task id":
        assert code_of(reply) == -32602, reply


BAD_UTF8 = st.sampled_from(
    [
        b"\xff",
        b"\xfe\xff",
        b"\x80",
        b"\xc0\xaf",  # overlong "/"
        b"\xe0\x80\xaf",
        b"\xed\xa0\x80",  # a UTF-16 surrogate encoded as UTF-8 (CESU-8)
        b"\xed\xb0\x80",
        b"\xf4\x90\x80\x80",  # beyond U+10FFFF
        b"\xc3",  # truncated
        b"\\ud800",  # a lone surrogate escape: valid JSON syntax, unstorable text
        b"\\udfff\\ud800",
        b"\\ud83d\\ude00",  # a proper pair: fine
        b"\xef\xbb\xbf",  # a BOM in the middle of a string: fine
    ]
)


def storable_json(body: bytes) -> bool:
    """Whether `body` is UTF-8 (a leading BOM allowed) JSON whose text a
    UTF-8 store can write back."""
    try:
        value = json.loads(body.decode("utf-8-sig"))
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except ValueError:  # UnicodeError included
        return False
    return True


@fuzz(500)
@given(
    junk=BAD_UTF8 | st.binary(min_size=1, max_size=12),
    where=st.sampled_from(["text", "method", "key", "outside", "prefix"]),
    version=st.sampled_from([None, "0.3", "1.0"]),
)
def test_invalid_utf8(target: Target, junk: bytes, where: str, version: str | None) -> None:
    """Bytes that are not UTF-8 (or decode to unstorable lone surrogates)
    anywhere in the body: -32700 with a null id; valid ones are served."""
    message = b'{"role":"user","messageId":"m","parts":[{"kind":"text","text":"T"}]}'
    body = b'{"jsonrpc":"2.0","id":3,"method":"M","params":{"message":%s}}' % message
    if where == "text":
        body = body.replace(b'"T"', b'"a' + junk + b'b"')
    elif where == "method":
        body = body.replace(b'"M"', b'"Send' + junk + b'"')
    elif where == "key":
        body = body.replace(b'"role"', b'"r' + junk + b'":1,"role"')
    elif where == "outside":
        body = body.replace(b'"params"', junk + b'"params"')
    else:
        body = junk + body
    body = body.replace(b'"M"', b'"SendMessage"')
    status, reply = target.reply(body, dialect_headers(version), request_id=ANY_ID)
    assert status == 200
    if storable_json(body):
        assert code_of(reply) not in (-32700, -32603) and reply["id"] == 3, (body, reply)
    else:
        assert code_of(reply) == -32700 and reply["id"] is None, (body, reply)


@fuzz(300)
@given(
    content_type=st.sampled_from(CONTENT_TYPES),
    kind=st.sampled_from(["send", "get", "form", "multipart", "empty", "json value"]),
    value=JSON,
    version=st.sampled_from([None, "0.3", "1.0", "zz"]),
)
def test_content_types(
    target: Target, content_type: str, kind: str, value: Any, version: str | None
) -> None:
    """A JSON content type (any charset, any +json) reads the body as JSON;
    anything else (or none) is -32005 before the body is looked at, so no
    web page can drive the agent with a form or text/plain."""
    envelope: Any = {
        "send": request(
            "SendMessage", {"message": user_message(), "configuration": {"blocking": False}}
        ),
        "get": request("GetTask", {"id": "no-such-task"}),
        "json value": value,
    }.get(kind)
    raw = {
        "form": b"jsonrpc=2.0&id=1&method=GetTask",
        "multipart": b'--xyz\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--xyz--\r\n',
        "empty": b"",
    }.get(kind)
    body = encode(envelope) if raw is None else raw
    headers = dialect_headers(version)
    _, baseline = target.reply(
        body, {**headers, "Content-Type": "application/json"}, request_id=ANY_ID
    )
    headers["Content-Type"] = content_type
    status, reply = target.reply(body, headers, request_id=ANY_ID)
    assert status == 200
    mimetype = content_type.split(";")[0].strip()
    if mimetype != "application/json" and not mimetype.endswith("+json"):
        assert code_of(reply) == -32005 and reply["id"] is None, reply
        return
    assert code_of(reply) == code_of(baseline) and reply["id"] == baseline["id"], (reply, baseline)
    if kind in ("form", "multipart", "empty"):
        assert code_of(reply) == -32700, reply
    elif kind == "get" and version != "zz":
        assert code_of(reply) == -32001, reply
    elif kind == "send" and version != "zz":
        assert "result" in reply, reply


def test_storm_leaves_the_app_serving_and_the_store_whole(target: Target) -> None:
    """Hand-picked worst cases in each dialect on one app: each is refused
    (-32700, or -32600 with 413), nothing is stored, and the app serves on."""
    bodies = [
        b"",
        b"{",
        b"[" * 50_000,
        b'{"a":' * 50_000,
        b"\xff" * 100,
        b'{"jsonrpc":"2.0","id":1e400,"method":"GetTask","params":{"id":"x"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x","historyLength":1e999}}',
        b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"user",'
        b'"messageId":"m","parts":[{"kind":"data","data":[-1e400]}]}}}',
        b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"user",'
        b'"messageId":"m","parts":[{"kind":"text","text":"\\udc00"}]}}}',
        b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"GetTask"}',
        encode(request("SendMessage", {"message": user_message("x" * (MAX_BODY + 1))})),
    ]
    for version in (None, "0.3", "1.0"):
        for body in bodies:
            status, reply = target.reply(body, dialect_headers(version), request_id=None)
            assert code_of(reply) in (-32700, -32600), (body[:80], reply)
            assert status == (413 if len(body) > MAX_BODY else 200), (body[:80], status)
    assert target.store.all() == {}


def page_token(payload: bytes) -> str:
    return base64.urlsafe_b64encode(payload).decode()


PAGE_TOKENS = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=300).map(page_token),
    JSON.map(lambda value: page_token(encode(value))),
    st.integers(1, 3000).map(lambda depth: page_token(b"[" * depth)),
    st.integers(1, 3000).map(lambda depth: page_token(nested("mixed", depth, True).encode())),
    st.lists(st.text(max_size=30), max_size=3).map(lambda cursor: page_token(encode(cursor))),
)


def field_of(reply: dict[str, Any]) -> str | None:
    """The field a -32602 names, in either dialect's error data."""
    data = reply["error"].get("data")
    if isinstance(data, dict):
        return data.get("field")
    for detail in data or []:
        for violation in detail.get("fieldViolations", []):
            return str(violation["field"])
    return None


@fuzz(300)
@given(token=PAGE_TOKENS, version=st.sampled_from([None, "0.3", "1.0"]))
def test_page_tokens(target: Target, token: str, version: str | None) -> None:
    """Any pageToken at all (text, base64 of bytes, of JSON, of brackets
    thousands deep, of cursors of the wrong shape): a page, or -32602
    naming pageToken; never an internal error."""
    target.known_task()  # something to list
    body = encode(request("ListTasks", {"pageToken": token, "pageSize": 5}))
    status, reply = target.reply(body, dialect_headers(version), request_id=1)
    assert status == 200
    if "error" in reply:
        assert code_of(reply) == -32602 and field_of(reply) == "pageToken", reply
    else:
        assert isinstance(reply["result"]["tasks"], list), reply


# --- regressions: web bugs this fuzzing found ------------------------------------


def roomy_target(directory: Path, name: str) -> Target:
    """A target with the default body limit (1 MiB), for the huge inputs."""
    store = FileStore(directory)
    dispatcher = RecordingDispatcher()
    app = create_app(Settings(blocking_timeout=0.001), store=store, dispatcher=dispatcher)
    return Target(app, store, dispatcher, Tally(name))


def test_regression_nested_page_token_is_invalid_params_not_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A pageToken of base64 `[[[[…` used to overflow json's recursion
    (-32603 and a traceback in the log); 100,000 of them is over the length
    limit, 3,000 is under it and reached the decoder."""
    caplog.set_level(logging.ERROR)
    target = roomy_target(tmp_path / "store", "nested page tokens")
    for depth in (3000, 100_000):
        body = encode(request("ListTasks", {"pageToken": page_token(b"[" * depth)}))
        for version in (None, "1.0"):
            _, reply = target.reply(body, dialect_headers(version), request_id=1)
            assert code_of(reply) == -32602 and field_of(reply) == "pageToken", reply
    assert [record for record in caplog.records if record.exc_info] == []


def test_regression_a_part_kind_that_is_not_a_string_is_invalid_params(target: Target) -> None:
    """A part whose `kind` is a list (unhashable) used to raise TypeError in
    the check of known kinds: -32603 instead of a clear -32602."""
    for kind in (["text"], {"a": 1}, 3):
        part = {"kind": kind, "x": 1}
        body = encode(request("SendMessage", {"message": user_message(parts=[part])}))
        for version in (None, "1.0"):
            _, reply = target.reply(body, dialect_headers(version), request_id=1)
            assert code_of(reply) == -32602 and field_of(reply) == "message.parts[0]", reply


def test_regression_huge_ids_are_not_echoed(tmp_path: Path) -> None:
    """A 900 KB task id used to come back twice in a 1.8 MB error reply;
    every id-like field of every method now gets a short error."""
    target = roomy_target(tmp_path / "store", "huge ids")
    huge = "a" * 900_000

    def message(**fields: Any) -> dict[str, Any]:
        return {"message": user_message(**fields)}

    cases = [
        ("GetTask", {"id": huge}),
        ("CancelTask", {"id": huge}),
        ("SubscribeToTask", {"id": huge}),
        ("SendMessage", message(taskId=huge)),
        ("SendMessage", message(contextId=huge)),
        ("SendMessage", message(messageId=huge)),
        ("SendMessage", message(role=huge)),
        ("SendStreamingMessage", message(taskId=huge)),
        ("ListTasks", {"contextId": huge}),
        ("ListTasks", {"status": huge}),
        ("ListTasks", {"pageToken": huge}),
        ("ListTasks", {"statusTimestampAfter": huge}),
        (huge, {}),
    ]
    for method, params in cases:
        for version in (None, "0.3", "1.0"):
            body = encode(request(method, params))
            status, reply = target.reply(body, dialect_headers(version), request_id=1)
            assert status == 200 and code_of(reply) in (-32601, -32602), reply
            assert huge[:200] not in json.dumps(reply), (method, version)
    assert target.store.all() == {}


def test_regression_overflowing_numbers_are_parse_errors(target: Target) -> None:
    """1e400 used to be read as inf and echoed as `Infinity`, which is not JSON."""
    for body in (
        b'{"jsonrpc":"2.0","id":1e400,"method":"GetTask","params":{"id":"x"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"user",'
        b'"messageId":"m","parts":[{"kind":"data","data":[-1e400]}]}}}',
    ):
        status, reply = target.reply(body, request_id=None)  # strict JSON, id null
        assert status == 200 and code_of(reply) == -32700, reply
    assert target.store.all() == {}


@pytest.mark.parametrize(
    "text", [b'"\\ud800"', b'"a\\udfffb"', b'"\xed\xa0\x80"'], ids=["escape", "low", "cesu-8"]
)
def test_regression_lone_surrogates_are_parse_errors(target: Target, text: bytes) -> None:
    """A lone surrogate used to reach the file store, fail to encode and come
    back as -32603 internal error."""
    body = (
        b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"role":"user",'
        b'"messageId":"m","parts":[{"kind":"text","text":%s}]}}}' % text
    )
    status, reply = target.reply(body, request_id=None)
    assert status == 200 and code_of(reply) == -32700, reply
    assert target.store.all() == {}


def test_regression_deep_data_is_refused_so_no_task_gets_stuck(target: Target) -> None:
    """Data 600 levels deep used to be saved, after which every transition
    (cancel, the worker's own) overflowed the stack copying it: -32603, and
    the task stayed `submitted` for ever. Now it is refused up front, and
    data at the limit is kept and can still be canceled."""
    site = NEST_SITES["data part"]
    for depth, accepted in ((600, False), (MAX_VALUE_DEPTH + 1, False), (MAX_VALUE_DEPTH, True)):
        body = site[0].replace("@", nested("[", depth, True))
        _, reply = target.reply(body.encode(), {"A2A-Version": "0.3"}, request_id=ANY_ID)
        if not accepted:
            assert code_of(reply) in (-32700, -32602), reply
            assert "nested deeper" in reply["error"]["message"], reply
            continue
        task_id = reply["result"]["id"]
        cancel = encode(request("CancelTask", {"id": task_id}))
        _, reply = target.reply(cancel, request_id=1)
        assert reply["result"]["status"]["state"] == "canceled", reply
    assert len(target.store.all()) == 1


def test_regression_data_too_deep_for_other_sdks_is_refused(target: Target) -> None:
    """Data or metadata 48 levels deep (under the envelope's limit) used to be
    stored; the a2a-sdk's protobuf Task then failed to parse it, so every
    client's 1.0 ListTasks broke. Now it is -32602 naming the field."""
    deep = nested("[", 48, True)
    for site, named in (
        ("data part", "message.parts[0].data"),
        ("metadata", "message.metadata"),
    ):
        value = deep if site == "data part" else '{"k":' + deep + "}"
        body = NEST_SITES[site][0].replace("@", value)
        for version in (None, "1.0"):
            _, reply = target.reply(body.encode(), dialect_headers(version), request_id=7)
            assert code_of(reply) == -32602 and field_of(reply) == named, reply
    assert target.store.all() == {}


def test_regression_chunked_body_over_the_limit_is_413(tmp_path: Path) -> None:
    """Werkzeug cut a chunked body at the limit without a word, so a too-large
    body was parsed cut short (-32700 "Unterminated string") instead of 413."""
    target = make_target(tmp_path / "store", "chunked limit")
    envelope = encode(request("SendMessage", {"message": user_message("x")}))
    at_limit = envelope + b" " * (MAX_BODY - len(envelope))
    as_json = {"Content-Type": "application/json"}
    with serving(target.app) as address:
        status, _, data = http_post(address, at_limit, as_json, chunked=True)
        assert status == 200 and "result" in json.loads(data), data[:200]
        for body in (at_limit + b" ", at_limit * 10):
            status, _, data = http_post(address, body, as_json, chunked=True)
            reply = valid_response(data, None)
            assert status == 413 and code_of(reply) == -32600, reply
            assert "too large" in reply["error"]["message"]


# --- over real HTTP ----------------------------------------------------------------


@contextlib.contextmanager
def serving(app: Flask) -> Iterator[tuple[str, int]]:
    """`app` on a threaded werkzeug server on a free port (no wrapping, so
    chunked bodies and lying lengths reach it as they are)."""
    port = free_port()
    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", port
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()


def http_post(
    address: tuple[str, int],
    body: bytes,
    headers: dict[str, str],
    *,
    chunked: bool,
    first_event: bool = False,
    hang_up: bool = False,
) -> tuple[int, str, bytes]:
    """POST `body` as it is; the whole reply, or with `first_event` of an
    event stream only its first event (a live stream need not end), or with
    `hang_up` nothing: the connection is closed once the body is sent."""
    connection = http.client.HTTPConnection(*address, timeout=30)
    try:
        path = "/"
        if "?A2A-Version" in headers:
            headers = dict(headers)
            path = "/?A2A-Version=" + urllib.parse.quote(headers.pop("?A2A-Version"))
        connection.putrequest("POST", path, skip_accept_encoding=True)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            if value:  # "" stands for a header not sent at all
                connection.putheader(name, value)
        if chunked:
            connection.putheader("Transfer-Encoding", "chunked")
            connection.endheaders()
            for start in range(0, len(body), 4096):
                piece = body[start : start + 4096]
                connection.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            connection.send(b"0\r\n\r\n")
        else:
            connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
        if hang_up:
            return 0, "", b""
        response = connection.getresponse()
        mimetype = response.getheader("Content-Type") or ""
        if not (first_event and mimetype.startswith("text/event-stream")):
            return response.status, mimetype, response.read()
        received = b""
        while not (received.endswith(b"\n\n") and b"data:" in received):
            line = response.readline()
            if not line:
                break
            received += line
        return response.status, mimetype, received
    finally:
        connection.close()


HTTP_BODIES = st.one_of(
    JSON.map(encode),
    st.binary(max_size=64),
    st.builds(
        lambda method, value, path: encode(
            _mutated(base_request(method, "no-such-task", {"text": "hi"}), path, value)
        ),
        METHOD,
        WRONG,
        st.sampled_from(ENVELOPE_PATHS + SEND_PATHS + GET_PATHS),
    ),
    st.integers(1, 3000).map(lambda depth: nested("[", depth, True).encode()),
    st.integers(MAX_BODY - 40, MAX_BODY + 200).map(
        lambda size: encode(request("SendMessage", {"message": user_message("y" * size)}))
    ),
    st.just(encode(request("SendMessage", {"message": user_message()}))),
)


def _mutated(envelope: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    mutate(envelope, path, value)
    return envelope


def test_over_real_http(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A smaller batch through a live threaded werkzeug server: real headers,
    content types (or none), chunked bodies, versions as header or query."""
    caplog.set_level(logging.WARNING, logger="werkzeug")  # one line per request otherwise
    target = make_target(tmp_path / "store", "over real HTTP")
    with serving(target.app) as address:
        plain = functools.partial(http_post, address, chunked=False)
        chunks = functools.partial(http_post, address, chunked=True)

        @settings(FUZZ, max_examples=250)
        @given(
            body=HTTP_BODIES,
            content_type=st.sampled_from(CONTENT_TYPES),
            version=VERSION,
            in_query=st.booleans(),
            chunked=st.booleans(),
        )
        def storm(
            body: bytes,
            content_type: str,
            version: str | None,
            in_query: bool,
            chunked: bool,
        ) -> None:
            headers = dialect_headers(version, in_query=in_query)
            headers["Content-Type"] = content_type
            target.post = chunks if chunked else plain
            status, reply = target.reply(body, headers, request_id=ANY_ID)
            assert status == (413 if len(body) > MAX_BODY else 200)
            mimetype = content_type.split(";")[0].strip()
            if status == 200 and mimetype != "application/json" and not mimetype.endswith("+json"):
                assert code_of(reply) == -32005, reply

        storm()
        finish(target)
    target.tally.report()


# --- hostile task ids against the file store --------------------------------------

SECRET = "SENTINEL-OUTSIDE-THE-STORE"


def outside_task(task_id: str) -> str:
    """A task that would be served (and could be continued) if an id escaped."""
    task = {
        "kind": "task",
        "id": task_id,
        "contextId": "ctx",
        "status": {"state": "input-required", "timestamp": "2020-01-01T00:00:00Z"},
        "history": [user_message(SECRET)],
        "metadata": {"secret": SECRET},
    }
    return json.dumps(task)


@dataclass
class Sandbox:
    root: Path
    store_dir: Path


@pytest.fixture
def sandbox(tmp_path: Path) -> Sandbox:
    """root/{x.json, secret.json, passwd, etc/passwd.json, sandbox/x.json,
    sandbox/store/{a/b.json, …}}: a readable task wherever an escaping id
    would land."""
    root = tmp_path
    store_dir = root / "sandbox" / "store"
    (store_dir / "a").mkdir(parents=True)
    (root / "etc").mkdir()
    for path, task_id in [
        (root / "sandbox" / "x.json", "x"),
        (root / "x.json", "x"),
        (root / "etc" / "passwd.json", "passwd"),
        (root / "sandbox" / "secret.json", "secret"),
        (store_dir / "a" / "b.json", "b"),
        (store_dir / "a" / "..json", "."),
    ]:
        path.write_text(outside_task(task_id))
    (root / "etc" / "passwd").write_text(f"root:x:0:0:{SECRET}:/root:/bin/sh\n")
    (root / "sandbox" / "notes.txt").write_text(SECRET)
    return Sandbox(root, store_dir)


def snapshot(root: Path) -> dict[str, tuple[str, int, str]]:
    """Every entry under `root`: kind, mtime and a content digest."""
    tree = {}
    for folder, directories, files in os.walk(root):
        for name in directories + files:
            path = Path(folder, name)
            info = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
            kind = "dir" if path.is_dir() else "file"
            tree[str(path.relative_to(root))] = (kind, info.st_mtime_ns, digest)
    return tree


class OpenedPaths:
    """Every path the process opens while `recording` (a `sys.addaudithook`
    hook, which cannot be removed, so it does nothing otherwise)."""

    paths: list[str] | None = None
    installed = False

    @classmethod
    def hook(cls, event: str, args: tuple[Any, ...]) -> None:
        if cls.paths is not None and event == "open" and isinstance(args[0], str | bytes):
            cls.paths.append(os.fsdecode(args[0]))

    @classmethod
    @contextlib.contextmanager
    def recording(cls) -> Iterator[list[str]]:
        if not cls.installed:
            sys.addaudithook(cls.hook)
            cls.installed = True
        cls.paths = []
        try:
            yield cls.paths
        finally:
            cls.paths = None


def hostile_ids(sandbox: Sandbox) -> list[str]:
    return [
        "../x",
        "../../x",
        "../../etc/passwd",
        "../secret",
        "a/b",
        "a/.",
        "\x00",
        "a\x00b",
        "x" * 10_000,
        "",
        ".",
        "..",
        "...",
        "ünïcødé",
        "日本語",
        "\u202ex",
        "x\ny",
        " x",
        "..\\x",
        "%2e%2e%2fx",
        "x" * 129,
        ".working/x",
        ".locks/0",
        str(sandbox.root / "sandbox" / "secret"),
        str(sandbox.root / "etc" / "passwd"),
        "/etc/passwd",
    ]


METHOD_SPELLINGS = {
    "get": ["GetTask", "tasks/get"],
    "cancel": ["CancelTask", "tasks/cancel"],
    "continue": ["SendMessage", "message/send"],
}


def hostile_request(kind: str, method: str, task_id: str) -> dict[str, Any]:
    if kind == "continue":
        message = user_message("answer", taskId=task_id)
        return request(method, {"message": message, "configuration": {"blocking": False}})
    return request(method, {"id": task_id})


def test_hostile_task_ids_touch_nothing_outside_the_file_store(sandbox: Sandbox) -> None:
    target = make_target(sandbox.store_dir, "hostile task ids")
    # Warm up, so lazily imported modules are not counted as opened files.
    for kind, methods in METHOD_SPELLINGS.items():
        for version in (None, "1.0"):
            target.reply(
                encode(hostile_request(kind, methods[0], "warm-up")), dialect_headers(version)
            )
    before = snapshot(sandbox.root)
    created: list[str] = []
    with OpenedPaths.recording() as opened:
        for task_id in hostile_ids(sandbox):
            for kind, methods in METHOD_SPELLINGS.items():
                for method in methods:
                    for version in (None, "0.3", "1.0"):
                        body = encode(hostile_request(kind, method, task_id))
                        status, reply = target.reply(body, dialect_headers(version), request_id=1)
                        assert status == 200
                        assert SECRET not in json.dumps(reply), (task_id, reply)
                        if task_id == "" and kind == "continue":
                            # "" is protobuf's "not set": a new task, in the store.
                            created.append(reply["result"].get("task", reply["result"])["id"])
                            continue
                        # An id no task could have is a bad parameter; any other is unknown.
                        expected = -32001 if is_safe_id(task_id) else -32602
                        assert code_of(reply) == expected, (task_id[:40], method, version, reply)
                        if version == "1.0":
                            info = reply["error"]["data"][0]
                            assert info["@type"] == ERROR_INFO
                            assert info["reason"] == (
                                "INVALID_PARAMS" if expected == -32602 else "TASK_NOT_FOUND"
                            )
                            if expected == -32001 and kind != "continue":
                                assert info["metadata"] == {"taskId": task_id}, info
                        elif expected == -32001 and kind != "continue":
                            assert reply["error"]["data"] == {"taskId": task_id}
    after = snapshot(sandbox.root)

    store_prefix = str(sandbox.store_dir.relative_to(sandbox.root))

    def outside(tree: dict[str, Any]) -> dict[str, Any]:
        return {
            path: entry
            for path, entry in tree.items()
            if Path(path).parts[:2] != Path(store_prefix).parts
        }

    assert outside(after) == outside(before)
    # Inside the store only the new tasks of the "" continuations (each its
    # own file) and the database (their rows, logs, message keys and contexts).
    changed = {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)}
    expected_changes = {f"{store_prefix}/{task_id}.json" for task_id in created}
    expected_changes |= {f"{store_prefix}/.store.db{suffix}" for suffix in ("", "-wal", "-shm")}
    assert changed - expected_changes <= {store_prefix}, changed
    assert target.dispatcher.enqueued == created and len(created) == 6

    store_dir = os.path.realpath(sandbox.store_dir)
    escaped = [
        path
        for path in opened
        if os.path.commonpath([os.path.realpath(path), store_dir]) != store_dir
    ]
    assert escaped == [], escaped

    sent = target.tally.sent
    print(
        f"\n[fuzz] hostile ids: {len(hostile_ids(sandbox))} ids x 6 methods x 3 dialects,"
        f" {sent} requests; files opened in the store: {len(opened)}, outside it: {len(escaped)};"
        f" entries changed outside it: 0"
    )
    finish(target)
    target.tally.report()


# --- hostile context ids, the same on every store ----------------------------------

# Client-chosen context ids that would be a path, a key pattern or a
# terminal trick if a store used them as names. Every store keeps them by
# digest, so each is accepted and comes back exactly as sent.
HOSTILE_CONTEXT_IDS = [
    "../../etc",
    "../../etc/passwd",
    "a\x00b",
    "\x00",
    "/etc/passwd",
    "a/b",
    ".",
    "..",
    ".contexts/x",
    "..\\x",
    "%2e%2e%2fx",
    "x\ny",
    "\u202ex",
    "日本語",
    "*",
    "toolnexus:task:*",
    "x" * 1024,  # the longest a client may choose
]
TOO_LONG_CONTEXT_ID = "x" * 1025


@pytest.fixture
def any_store_target(store_kind: str, stores: Stores, tmp_path: Path) -> tuple[str, Target, Path]:
    """The fuzzed app on each built-in store; (store kind, target, a folder
    holding the file store's directory and a file beside it)."""
    root = tmp_path / "root"
    (root / "store").mkdir(parents=True)
    (root / "beside.json").write_text(outside_task("beside"))
    # The file store in a folder of its own, with a file beside it to escape to.
    store = FileStore(root / "store") if store_kind == "file" else stores.open(store_kind)
    dispatcher = RecordingDispatcher()
    app = create_app(Settings(blocking_timeout=0.001), store=store, dispatcher=dispatcher)
    return (
        store_kind,
        Target(app, store, dispatcher, Tally(f"hostile contexts, {store_kind}")),
        root,
    )


def _answers_for_hostile_contexts(target: Target) -> list[tuple[Any, ...]]:
    """What the service answers for each hostile context id in each dialect,
    with the parts that differ by run (ids, times) left out."""
    answers: list[tuple[Any, ...]] = []
    for context_id in [*HOSTILE_CONTEXT_IDS, TOO_LONG_CONTEXT_ID]:
        for version in (None, "0.3", "1.0"):
            headers = dialect_headers(version)
            send = request("SendMessage", {"message": user_message("hi", contextId=context_id)})
            status, reply = target.reply(encode(send), headers, request_id=1)
            assert status == 200
            if context_id == TOO_LONG_CONTEXT_ID:
                answers.append((version, "send", code_of(reply), field_of(reply)))
                continue
            assert "result" in reply, (context_id[:40], version, reply)
            task = reply["result"].get("task", reply["result"])
            assert task["contextId"] == context_id
            assert task["history"][0]["contextId"] == context_id
            got = request("GetTask", {"id": task["id"]})
            _, reply = target.reply(encode(got), headers, request_id=1)
            assert reply["result"]["contextId"] == context_id, reply
            listed = request("ListTasks", {"contextId": context_id, "pageSize": 100})
            _, reply = target.reply(encode(listed), headers, request_id=1)
            found = reply["result"]["tasks"]
            assert task["id"] in [t["id"] for t in found], (context_id[:40], version)
            assert {t["contextId"] for t in found} == {context_id}
            # a follow-up in the same context is a new task of that context
            again = request("SendMessage", {"message": user_message("again", contextId=context_id)})
            _, reply = target.reply(encode(again), headers, request_id=1)
            assert reply["result"].get("task", reply["result"])["contextId"] == context_id
            answers.append((version, "send", "result", len(found)))
    return answers


def test_hostile_context_ids_behave_the_same_on_every_store(
    any_store_target: tuple[str, Target, Path],
) -> None:
    kind, target, root = any_store_target
    before = snapshot(root)
    answers = _answers_for_hostile_contexts(target)
    # The one refusal is the length limit, and it is the same in each dialect.
    assert {a for a in answers if a[2] != "result"} == {
        (version, "send", -32602, "message.contextId") for version in (None, "0.3", "1.0")
    }
    # Listing a context finds its own tasks and only those: one per dialect
    # so far plus each follow-up, whichever store keeps them.
    assert [a[3] for a in answers if a[2] == "result"] == [
        1 + 2 * n for _ in HOSTILE_CONTEXT_IDS for n in range(3)
    ]
    after = snapshot(root)
    outside = {p for p in before.keys() | after.keys() if not p.startswith("store")}
    assert all(before.get(p) == after.get(p) for p in outside), kind
    if kind == "file":  # a context is a row of the database, never a file named after it
        assert {Path(p).name for p in after if p.startswith("store/")} - {
            Path(p).name for p in before
        } <= {f"{t}.json" for t in target.store.all()} | {
            ".store.db",
            ".store.db-wal",
            ".store.db-shm",
        }
    finish(target)
    target.tally.report()


def test_a_hostile_context_id_taken_by_one_caller_is_refused_to_another_on_every_store(
    any_store_target: tuple[str, Target, Path],
) -> None:
    from shared.errors import ContextTaken
    from shared.task import new_task, text_message

    _, target, _ = any_store_target
    store: Any = target.store
    for context_id in HOSTILE_CONTEXT_IDS:
        mine = new_task(text_message("user", "a"), context_id, "alice")
        assert store.create(mine, None).created
        with pytest.raises(ContextTaken):
            store.create(new_task(text_message("user", "b"), context_id, "mallory"), None)
        assert store.create(new_task(text_message("user", "c"), context_id, "alice"), None).created
        assert store.get(mine["id"])["contextId"] == context_id
