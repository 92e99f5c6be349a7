"""Fuzzed input at the HTTP+JSON routes (the companion of
tests/test_reliability_fuzz.py, whose app, store checks and strategies it
uses): any verb at any route-like path with hostile path segments, query
strings, headers and bodies, through the Flask test client and over real
HTTP. Every reply is JSON: an error in the google.rpc.Status shape whose
`code` is the HTTP status, never a 5xx and never an HTML page; afterwards
the app still serves and every stored task is whole.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.support.strategies import json_values
from tests.test_reliability_fuzz import (
    CONTENT_TYPES,
    VERSION,
    Target,
    encode,
    fuzz,
    make_target,
    serving,
    target,  # noqa: F401  (the fixture)
    user_message,
)

VERBS = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS"]
# Each route-like path with the verbs a client would use on it.
TEMPLATES = {
    "/message:send": ["POST"],
    "/message:stream": ["POST"],
    "/tasks": ["GET"],
    "/tasks/{a}": ["GET"],
    "/tasks/{a}:cancel": ["POST"],
    "/tasks/{a}:subscribe": ["GET", "POST"],
    "/tasks/{a}/pushNotificationConfigs": ["GET", "POST"],
    "/tasks/{a}/pushNotificationConfigs/{b}": ["GET", "DELETE"],
    "/extendedAgentCard": ["GET"],
    "/{a}/tasks/{b}": ["GET"],
    "/{a}/message:send": ["POST"],
    "/tasks/{a}/{b}": ["GET"],
    "/tasks:{a}": ["GET", "POST"],
}
# Half the time a verb the path serves, so most requests get past the router.
ROUTE = st.sampled_from(sorted(TEMPLATES)).flatmap(
    lambda template: st.tuples(
        st.just(template), st.sampled_from(TEMPLATES[template]) | st.sampled_from(VERBS)
    )
)
SEGMENT = st.sampled_from(["", "tasks", ":cancel", "..", "%2F", "a" * 300]) | st.text(max_size=40)
QUERY_NAMES = ["historyLength", "pageSize", "pageToken", "contextId", "status", "includeArtifacts"]
QUERY = st.lists(
    st.tuples(
        st.sampled_from(QUERY_NAMES) | st.text(max_size=10),
        st.sampled_from(["--1", "-0", "+1", "1e3", "\uff11", "", "9" * 30, "TRUE"])
        | st.text(max_size=30),
    ),
    max_size=4,
)
BODIES = st.one_of(
    st.just(b""),
    st.binary(max_size=200),
    json_values().map(encode),
    st.builds(
        lambda value, where: encode({"message": {**user_message(), where: value}}),
        json_values(max_leaves=4),
        st.sampled_from(["role", "parts", "messageId", "contextId", "taskId", "metadata"]),
    ),
    st.builds(lambda value: encode({"message": user_message(), "configuration": value}),
              json_values(max_leaves=4)),
)  # fmt: skip


def path_info(template: str, a: str, b: str) -> str:
    """The path as a WSGI server hands it over: percent-decoded, each byte a
    latin-1 character (PEP 3333)."""
    path = template.format(a=a, b=b)
    return path.encode("utf-8").decode("latin-1")


def check_reply(fuzzed: Target, status: int, mimetype: str, data: bytes, stream: bool) -> None:
    fuzzed.tally.sent += 1
    fuzzed.tally.statuses[status] += 1
    assert status < 500, (status, data[:300])
    assert b"<html" not in data[:200].lower() and b"<!doctype" not in data[:200].lower()
    if stream:
        assert status == 200
        return
    if status == 204:  # a CORS preflight: no body
        return
    assert mimetype.startswith("application/json"), (status, mimetype, data[:200])
    reply = json.loads(data)
    if status >= 400:
        error = reply["error"]
        assert error["code"] == status, reply
        assert isinstance(error["message"], str) and error["message"]
        reason = error["details"][0]["reason"]
        fuzzed.tally.codes[reason] += 1
    else:
        fuzzed.tally.codes["result"] += 1


@fuzz(250)
@given(
    route=ROUTE,
    a=SEGMENT,
    b=SEGMENT,
    query=QUERY,
    body=BODIES,
    content_type=st.sampled_from(CONTENT_TYPES),
    version=st.sampled_from(["1.0", "1.0", None]) | VERSION,
    known=st.booleans(),
)
def test_any_request_at_the_routes_is_answered_in_json(
    target: Target,  # noqa: F811  (the fixture imported above)
    route: tuple[str, str],
    a: str,
    b: str,
    query: list[tuple[str, str]],
    body: bytes,
    content_type: str,
    version: str | None,
    known: bool,
) -> None:
    template, verb = route
    if known:
        a = target.known_task()
    headers = {"Content-Type": content_type} if content_type else {}
    if version is not None:
        headers["A2A-Version"] = version
    client = target.app.test_client()
    response = client.open(
        "/",
        method=verb,
        data=body,
        headers=headers,
        query_string=urllib.parse.urlencode(query),
        environ_overrides={"PATH_INFO": path_info(template, a, b)},
        buffered=False,
    )
    stream = response.mimetype == "text/event-stream"
    # A stream of a task that is not finishing would go on: its head is enough.
    data = b"" if stream else response.get_data()
    response.close()
    check_reply(target, response.status_code, response.mimetype, data, stream)


def http_request(
    address: tuple[str, int], verb: str, path: bytes, body: bytes
) -> tuple[int, str, bytes]:
    """One request written byte for byte (no client library would send these paths)."""
    head = (
        b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nA2A-Version: 1.0\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
    ) % (verb.encode(), path, len(body))
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(head + body)
        response = http.client.HTTPResponse(sock)
        response.begin()
        content_type = response.getheader("Content-Type") or ""
        data = b"" if content_type.startswith("text/event-stream") else response.read()
        return response.status, content_type, data


def test_raw_paths_over_real_http_are_answered_in_json(tmp_path: Path) -> None:
    """Paths no client library would send (raw bytes beyond ASCII, empty and
    doubled segments, a NUL), straight to a real server."""
    fuzzed = make_target(tmp_path / "store", "raw-http")
    raw = [
        b"/tasks/\xc3\xa9t\xc3\xa9",
        b"/tasks/\xff\xfe",
        b"/tasks//",
        b"/tasks/%00",
        b"/tasks/a%2Fb:cancel",
        b"//tasks",
        b"/tasks/x:cancel:cancel",
        b"/%ff/tasks",
        b"/tasks/" + b"x" * 5000,
        b"/tasks?historyLength=%ff",
        b"/tasks?pageSize=99999999999999999999999",
        b"/message:send?A2A-Version=1.0",
    ]
    with serving(fuzzed.app) as address:
        for path in raw:
            for verb in ("GET", "POST", "DELETE"):
                status, mimetype, data = http_request(address, verb, path, b"{}")
                check_reply(fuzzed, status, mimetype.split(";")[0], data, False)
    fuzzed.tally.report()
