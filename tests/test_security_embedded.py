"""Issue 12 replayed against the embedded server (`toolnexus-serve`), over real HTTP.

One server with tokens and JWTs (a JWK set served by the test) for the two
callers; one without auth, as on a developer's laptop, for what a web page
could make the browser do to it; raw sockets for what no client library
would send.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
import requests

from tests.support.embedded import embedded_server
from tests.support.isolation import Caller, replay_isolation
from tests.support.jwks import Issuer
from tests.support.raw_http import FRAMING_CASES, exchange

TOKENS = "alice:alice-token,bob:bob-token"
ALLOWED_ORIGIN = "https://app.example.com"
ALLOWED_HOST = "agent.test"
SEND = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendMessage",
    "params": {"message": {"role": "user", "messageId": "m-1", "parts": [{"text": "hi"}]}},
}


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    served = Issuer().serve()
    yield served
    served.close()


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, issuer: Issuer) -> Iterator[str]:
    """Tokens and JWTs, the ask-back agent, a file store."""
    folder = tmp_path_factory.mktemp("guarded")
    env = {
        "TOOLNEXUS_RUN": "examples.agents:ask_back",
        "TOOLNEXUS_STORE": "file:./tasks",
        "TOOLNEXUS_API_TOKENS": TOKENS,
        **issuer.env(),
    }
    with embedded_server(folder, env) as (host, port):
        yield f"http://{host}:{port}"


@pytest.fixture(scope="module")
def laptop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """No auth, as a developer runs it; one extra host name and one page allowed."""
    folder = tmp_path_factory.mktemp("laptop")
    env = {
        "TOOLNEXUS_RUN": "examples.agents:echo",
        "TOOLNEXUS_ALLOWED_HOSTS": ALLOWED_HOST,
        "TOOLNEXUS_ALLOWED_ORIGINS": ALLOWED_ORIGIN,
    }
    with embedded_server(folder, env) as address:
        yield address


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- finding 1: two callers, every method ------------------------------------------


def test_token_callers_see_nothing_of_each_other(guarded: str) -> None:
    replay_isolation(guarded, bearer("alice-token"), bearer("bob-token"))


def test_jwt_callers_see_nothing_of_each_other(guarded: str, issuer: Issuer) -> None:
    replay_isolation(guarded, issuer.headers("alice"), issuer.headers("bob"))


def test_a_jwt_subject_is_not_the_token_of_the_same_name(guarded: str, issuer: Issuer) -> None:
    """`sub: alice` in a JWT and the token named alice are two callers."""
    replay_isolation(guarded, bearer("alice-token"), issuer.headers("alice"))


# --- finding 3: browsers --------------------------------------------------------------


def tasks_of(address: tuple[str, int]) -> list[str]:
    """The ids of every task, asked from loopback as a legitimate client."""
    caller = Caller(f"http://{address[0]}:{address[1]}", {})
    return caller.listed()


def raw_post(host: str, headers: dict[str, str], body: bytes) -> bytes:
    lines = ["POST / HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_a_web_page_cannot_drive_the_agent(laptop: tuple[str, int]) -> None:
    """What a page on evil.example can make a browser send: a text/plain
    POST (no preflight) from its origin, to a rebound name or to loopback."""
    before = tasks_of(laptop)
    body = json.dumps(SEND).encode()
    for host in ("evil.example", f"evil.example:{laptop[1]}", f"127.0.0.1:{laptop[1]}"):
        for content_type in ("text/plain", "application/json"):
            headers = {"Origin": "http://evil.example", "Content-Type": content_type}
            reply = exchange(laptop, raw_post(host, headers, body))
            assert reply.status in (400, 403), (host, content_type, reply)
            assert reply.headers["content-type"] == "application/json"
            error = json.loads(reply.body)["error"]
            assert error["code"] == -32600, error
            assert "access-control-allow-origin" not in reply.headers
    assert tasks_of(laptop) == before


@pytest.mark.parametrize("path", ["/", "/.well-known/agent-card.json", "/.well-known/agent.json"])
def test_dns_rebinding_a_foreign_host_is_refused(laptop: tuple[str, int], path: str) -> None:
    """Same origin to the browser (the page's own name, now pointing here),
    so no Origin check applies: the Host does."""
    before = tasks_of(laptop)
    method = "POST" if path == "/" else "GET"
    body = json.dumps(SEND).encode() if method == "POST" else b""
    request = (
        f"{method} {path} HTTP/1.1\r\nHost: rebind.evil.example:{laptop[1]}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    reply = exchange(laptop, request)
    assert reply.status == 400, reply
    assert json.loads(reply.body)["error"]["code"] == -32600
    assert tasks_of(laptop) == before


def test_an_absolute_form_target_is_a_foreign_host_too(laptop: tuple[str, int]) -> None:
    request = (
        b"GET http://evil.example/.well-known/agent-card.json HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    )
    reply = exchange(laptop, request)
    assert reply.status == 400, reply
    assert b"http://evil.example" not in reply.body


def test_configured_names_and_origins_are_served_with_cors(laptop: tuple[str, int]) -> None:
    url = f"http://{laptop[0]}:{laptop[1]}/"
    named = {"Host": f"{ALLOWED_HOST}:{laptop[1]}"}
    card = requests.get(url + ".well-known/agent-card.json", headers=named, timeout=10)
    assert card.status_code == 200
    assert card.json()["supportedInterfaces"][0]["url"] == f"http://{ALLOWED_HOST}:{laptop[1]}/"
    preflight = requests.options(
        url,
        headers={
            "Origin": ALLOWED_ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, authorization",
        },
        timeout=10,
    )
    assert preflight.status_code == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == ALLOWED_ORIGIN
    assert "POST" in preflight.headers["Access-Control-Allow-Methods"]
    assert "authorization" in preflight.headers["Access-Control-Allow-Headers"].lower()
    sent = requests.post(url, json=SEND, headers={"Origin": ALLOWED_ORIGIN}, timeout=10)
    assert sent.status_code == 200 and "result" in sent.json(), sent.text
    assert sent.headers["Access-Control-Allow-Origin"] == ALLOWED_ORIGIN
    assert "Origin" in sent.headers["Vary"]
    refused = requests.options(
        url,
        headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        timeout=10,
    )
    assert refused.status_code == 403
    assert "Access-Control-Allow-Origin" not in refused.headers


# --- finding 4: the card's URL ---------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Forwarded-Host": "evil.example"},
        {"X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"},
        {"Forwarded": "host=evil.example;proto=https"},
    ],
)
def test_card_url_ignores_forwarding_headers(
    laptop: tuple[str, int], headers: dict[str, str]
) -> None:
    url = f"http://{laptop[0]}:{laptop[1]}"
    card = requests.get(url + "/.well-known/agent-card.json", headers=headers, timeout=10)
    assert card.status_code == 200
    assert "evil" not in card.text
    assert card.json()["supportedInterfaces"][0]["url"] == url + "/"
    assert {"A2A-Version", "Host"} <= {v.strip() for v in card.headers["Vary"].split(",")}
    assert card.headers["Cache-Control"].startswith("public")


@pytest.mark.parametrize("host", ["", "a b", "[::1", "127.0.0.1:port", "/", "@evil.example"])
def test_a_malformed_host_is_refused_never_an_http_slash_url(
    laptop: tuple[str, int], host: str
) -> None:
    request = f"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    reply = exchange(laptop, request)
    assert reply.status == 400, reply
    assert b"http:/" not in reply.body
    assert json.loads(reply.body)["error"]["code"] == -32600


# --- finding 7: framing errors ------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(FRAMING_CASES))
def test_framing_errors_are_json(laptop: tuple[str, int], case: str) -> None:
    reply = exchange(laptop, FRAMING_CASES[case])
    assert reply.headers.get("content-type") == "application/json", reply
    answer = json.loads(reply.body)
    assert answer["jsonrpc"] == "2.0" and answer["id"] in (None, 1), answer
    if reply.status != 200:  # werkzeug reads some of these as an empty or cut body
        assert 400 <= reply.status < 500 and answer["error"]["code"] == -32600, answer
    else:
        assert "error" in answer, answer
    assert b"<html" not in reply.body.lower()


def test_a_body_cut_short_is_a_json_400_not_an_internal_error(laptop: tuple[str, int]) -> None:
    head = b"Content-Type: application/json\r\nContent-Length: 100\r\n"
    with socket.create_connection(laptop, timeout=10) as connection:
        connection.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + head + b'\r\n{"jsonrpc"')
        connection.shutdown(socket.SHUT_WR)  # the client stops sending: 90 bytes never come
        received = b"".join(iter(lambda: connection.recv(65536), b""))
    status, _, rest = received.partition(b"\r\n")
    assert status.split()[1] == b"400", received[:300]
    answer = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert answer["error"]["code"] == -32600
    assert "incomplete" in answer["error"]["message"]


def test_the_server_serves_on_after_the_framing_errors(laptop: tuple[str, int]) -> None:
    for case in FRAMING_CASES.values():
        exchange(laptop, case)
    url = f"http://{laptop[0]}:{laptop[1]}/"
    reply = requests.post(url, json=SEND | {"id": 2}, timeout=10)
    assert reply.status_code == 200 and "result" in reply.json()
