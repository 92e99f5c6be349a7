"""Issue 12 replayed against the deployment: gunicorn (web.http.gunicorn_conf, gevent
workers) and a real Celery worker and beat, as compose.yaml runs them, on a
private Redis; callers with tokens, JWTs from a JWK set the test serves, and
the official a2a-sdk client."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskNotFoundError,
    TaskState,
)

from tests.support.a2a import wait_ready
from tests.support.compose import local_stack
from tests.support.isolation import Caller, replay_isolation
from tests.support.jwks import Issuer
from tests.support.raw_http import FRAMING_CASES, exchange

TOKENS = "alice:alice-token,bob:bob-token"
ALLOWED_ORIGIN = "https://app.example.com"


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    served = Issuer().serve()
    yield served
    served.close()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory, issuer: Issuer) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("security-deployment")
    overrides = {"TOOLNEXUS_API_TOKENS": TOKENS, "TOOLNEXUS_RUN": "examples.agents:ask_back"}
    with local_stack(folder, overrides) as (_, stack):
        stack.start(
            "web", WEB_CONCURRENCY="1", TOOLNEXUS_ALLOWED_ORIGINS=ALLOWED_ORIGIN, **issuer.env()
        )
        stack.start("worker")
        stack.start("beat")  # /readyz waits for the reaper's first run
        wait_ready(stack.web_url)
        yield stack.web_url


def address_of(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").partition(":")
    return host, int(port)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# --- finding 1: two callers, every method ------------------------------------------


def test_token_callers_see_nothing_of_each_other(deployment: str) -> None:
    replay_isolation(deployment, bearer("alice-token"), bearer("bob-token"))


def test_jwt_callers_see_nothing_of_each_other(deployment: str, issuer: Issuer) -> None:
    replay_isolation(deployment, issuer.headers("alice"), issuer.headers("bob"))


async def sdk_client(http: httpx.AsyncClient, url: str) -> Any:
    card = await A2ACardResolver(http, url).get_agent_card()
    assert "jwt" in card.security_schemes
    assert card.security_schemes["jwt"].http_auth_security_scheme.bearer_format == "JWT"
    return ClientFactory(ClientConfig(streaming=False, polling=True, httpx_client=http)).create(
        card
    )


async def sdk_strangers(url: str, issuer: Issuer) -> None:
    async with (
        httpx.AsyncClient(timeout=30, headers=issuer.headers("alice")) as alice_http,
        httpx.AsyncClient(timeout=30, headers=issuer.headers("bob")) as bob_http,
    ):
        alice = await sdk_client(alice_http, url)
        bob = await sdk_client(bob_http, url)
        message = Message(role=Role.ROLE_USER, message_id="sdk-alice", parts=[Part(text="hi")])
        task = None
        async for event in alice.send_message(SendMessageRequest(message=message)):
            task = event.task
        assert task is not None and task.id
        deadline = time.monotonic() + 30
        while task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
            assert time.monotonic() < deadline, f"task stuck in {task.status.state}"
            await asyncio.sleep(0.05)
            task = await alice.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await bob.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await bob.cancel_task(CancelTaskRequest(id=task.id))
        answer = Message(
            role=Role.ROLE_USER, message_id="sdk-mallory", task_id=task.id, parts=[Part(text="M")]
        )
        with pytest.raises(TaskNotFoundError):
            async for _ in bob.send_message(SendMessageRequest(message=answer)):
                pass
        listed = await bob.list_tasks(ListTasksRequest(page_size=100))
        assert task.id not in [t.id for t in listed.tasks]
        mine = await alice.list_tasks(ListTasksRequest(page_size=100))
        assert task.id in [t.id for t in mine.tasks]
        still = await alice.get_task(GetTaskRequest(id=task.id))
        assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert "Mallory" not in str(still) and "sdk-mallory" not in str(still)
        await alice.close()
        await bob.close()


def test_official_sdk_clients_see_nothing_of_each_other(deployment: str, issuer: Issuer) -> None:
    asyncio.run(sdk_strangers(deployment, issuer))


def test_a_bad_jwt_is_401_before_anything_is_read(deployment: str, issuer: Issuer) -> None:
    other = Issuer(audience="someone-else")
    for token in (
        other.token("alice"),  # another key and audience
        issuer.token("alice", aud="someone-else"),
        issuer.token("alice", iss="https://other.example"),
        issuer.token("alice", lifetime=-3600),
        issuer.token(None),  # no subject
        "not.a.jwt",
    ):
        reply = Caller(deployment, bearer(token)).post("ListTasks", {})
        assert reply.status_code == 401, reply.text
        assert reply.json()["error"]["code"] == -32000
        assert reply.headers["WWW-Authenticate"].startswith("Bearer")


# --- finding 3: CORS on the front end -------------------------------------------------


def test_cors_for_allowed_origins_only(deployment: str) -> None:
    preflight = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x"}
    allowed = requests.options(
        deployment + "/", headers={"Origin": ALLOWED_ORIGIN, **preflight}, timeout=10
    )
    assert allowed.status_code == 204
    assert allowed.headers["Access-Control-Allow-Origin"] == ALLOWED_ORIGIN
    refused = requests.options(
        deployment + "/", headers={"Origin": "http://evil.example", **preflight}, timeout=10
    )
    assert refused.status_code == 403 and refused.json()["error"]["code"] == -32600
    assert "Access-Control-Allow-Origin" not in refused.headers
    caller = Caller(deployment, {**bearer("alice-token"), "Origin": "http://evil.example"})
    before = Caller(deployment, bearer("alice-token")).listed()
    sent = caller.post("SendMessage", {"message": {"role": "user", "messageId": "x",
                                                   "parts": [{"text": "hi"}]}})  # fmt: skip
    assert sent.status_code == 403 and sent.json()["error"]["code"] == -32600
    assert Caller(deployment, bearer("alice-token")).listed() == before
    welcome = Caller(deployment, {**bearer("alice-token"), "Origin": ALLOWED_ORIGIN})
    listed = welcome.post("ListTasks", {})
    assert listed.status_code == 200
    assert listed.headers["Access-Control-Allow-Origin"] == ALLOWED_ORIGIN


# --- finding 4: the card's URL -----------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "evil.example"},
        {"X-Forwarded-Host": "evil.example"},
        {"Host": "evil.example", "X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https"},
    ],
)
def test_card_url_never_comes_from_an_unchecked_host(
    deployment: str, headers: dict[str, str]
) -> None:
    """gunicorn serves any Host (a proxy may front it under any name), but an
    unchecked one never becomes the card's URL: the listening address does."""
    card = requests.get(deployment + "/.well-known/agent-card.json", headers=headers, timeout=10)
    assert card.status_code == 200
    assert "evil" not in card.text
    url = card.json()["supportedInterfaces"][0]["url"]
    # The scheme may be https: gunicorn believes X-Forwarded-Proto from a proxy
    # on loopback only (its forwarded_allow_ips), which this test client is.
    assert url.partition("://")[2] == deployment.partition("://")[2] + "/", url
    assert "A2A-Version" in card.headers["Vary"]


# --- finding 7: framing errors --------------------------------------------------------------


UNREADABLE = (400, "bad HTTP request: the request line or a header could not be read")
TOO_MANY_HEADERS = (431, "request header fields too large, or too many of them")
# What gunicorn (behind web.http.gunicorn_conf) answers each case with: the status
# and the JSON-RPC error's message, spelled out here, not read from the
# product, so a wrong or swapped message fails.
FRAMING_ANSWERS: dict[str, tuple[int, str]] = {
    "NUL in a header": UNREADABLE,
    "Content-Length not a number": UNREADABLE,
    "negative Content-Length": UNREADABLE,
    "two Content-Lengths": UNREADABLE,
    "a 70 KB header": TOO_MANY_HEADERS,
    "1,000 headers": TOO_MANY_HEADERS,
    "a garbage request line": UNREADABLE,
    "a request line that is one word": UNREADABLE,
    "a 70 KB request target": (414, "request line too long"),
}


def test_every_framing_case_has_its_answer() -> None:
    assert set(FRAMING_ANSWERS) == set(FRAMING_CASES)


@pytest.mark.parametrize("case", sorted(FRAMING_CASES))
def test_framing_errors_are_json(deployment: str, case: str) -> None:
    reply = exchange(address_of(deployment), FRAMING_CASES[case])
    status, message = FRAMING_ANSWERS[case]
    assert reply.status == status, reply
    assert reply.headers.get("content-type") == "application/json", reply
    answer = json.loads(reply.body)
    assert answer == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    assert b"<html" not in reply.body.lower()
    assert b"garbage" not in reply.body and b"aaaa" not in reply.body  # nothing echoed


@pytest.mark.parametrize("host", ["", "a b", "[::1", "evil.example:port", "@evil.example"])
def test_a_malformed_host_never_makes_an_http_slash_url(deployment: str, host: str) -> None:
    request = f"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    reply = exchange(address_of(deployment), request)
    assert reply.headers.get("content-type") == "application/json", reply
    if reply.status == 200:
        url = json.loads(reply.body)["supportedInterfaces"][0]["url"]
        assert url == deployment + "/", url
    else:  # gunicorn itself refuses some of them
        assert reply.status == 400 and json.loads(reply.body)["error"]["code"] == -32600
    assert b'http:/"' not in reply.body and b"evil" not in reply.body
