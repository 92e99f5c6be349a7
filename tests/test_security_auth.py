"""Who may call: token settings that name no token, JWT settings and
verification (a static key, a JWK set over real HTTP that goes down and
rotates), and the schemes the card declares."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard
from flask.testing import FlaskClient
from google.protobuf import json_format

from shared import Settings, memory_store
from shared.errors import ConfigError
from tests.support.embedded import command
from tests.support.jwks import AUDIENCE, ISSUER, Issuer
from tests.support.redis_server import free_port
from tests.test_web_support import PlayingDispatcher, user_message
from web import create_app
from web.http.browsers import host_name

ROOT = Path(__file__).resolve().parent.parent


def client_for(settings: Settings) -> FlaskClient:
    store = memory_store()
    return create_app(settings, store=store, dispatcher=PlayingDispatcher(store)).test_client()


def post(client: FlaskClient, method: str, params: Any, token: str | None) -> tuple[int, Any]:
    headers = {"Content-Type": "application/json", "A2A-Version": "1.0"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    response = client.post("/", data=body, headers=headers)
    return response.status_code, response.get_json()


def send(client: FlaskClient, token: str | None) -> tuple[int, Any]:
    return post(client, "SendMessage", {"message": user_message()}, token)


# --- finding 2: token settings that parse to no token -------------------------------


@pytest.mark.parametrize("value", [",", " , ", ",,,", "alice:", "alice: ,bob:tok"])
def test_token_settings_naming_no_token_are_refused(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({"TOOLNEXUS_API_TOKENS": value})
    message = str(caught.value)
    assert message.startswith("TOOLNEXUS_API_TOKENS=") and "\n" not in message


def test_an_empty_token_setting_still_means_open() -> None:
    assert Settings.from_env({"TOOLNEXUS_API_TOKENS": ""}).api_tokens == ()
    assert Settings.from_env({"TOOLNEXUS_API_TOKENS": "  "}).api_tokens == ()
    status, reply = send(client_for(Settings.from_env({"TOOLNEXUS_API_TOKENS": ""})), None)
    assert status == 200 and "task" in reply["result"]


def start_up(program: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLNEXUS_")}
    gunicorn = [
        sys.executable,
        "-m",
        "gunicorn",
        "-c",
        "python:web.http.gunicorn_conf",
        "web:create_app()",
    ]
    argv = {
        "gunicorn": gunicorn,
        "toolnexus-serve": [*command(), "--port", str(free_port())],
        "celery worker": [sys.executable, "-m", "celery", "-A", "worker", "worker"],
    }
    return subprocess.run(
        argv[program], env={**clean, **env, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return subprocess.run(
        argv, env={**clean, **env, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


BAD_KEY = {
    "TOOLNEXUS_JWT_KEY": "not a key",
    "TOOLNEXUS_JWT_ISSUER": "i",
    "TOOLNEXUS_JWT_AUDIENCE": "a",
}


@pytest.mark.parametrize("program", ["gunicorn", "toolnexus-serve"])
@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"TOOLNEXUS_API_TOKENS": " , "}, "TOOLNEXUS_API_TOKENS=' , ': names no token"),
        ({"TOOLNEXUS_JWT_JWKS_URL": "http://127.0.0.1:9/jwks"}, "needs TOOLNEXUS_JWT_ISSUER"),
        (BAD_KEY, "TOOLNEXUS_JWT_KEY: not a PEM public key"),
    ],
)
def test_servers_refuse_to_start_in_one_line(program: str, env: dict[str, str], said: str) -> None:
    result = start_up(program, env)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert said in lines[0]


@pytest.mark.parametrize("value", [",", " , "])
def test_a_celery_worker_refuses_tokens_naming_none_in_one_line(value: str) -> None:
    result = start_up("celery worker", {"TOOLNEXUS_API_TOKENS": value})
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"toolnexus: TOOLNEXUS_API_TOKENS={value!r}: names no token")


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("TOOLNEXUS_JWT_ALGORITHMS", "none", "'none' is not one of"),
        ("TOOLNEXUS_JWT_ALGORITHMS", "HS256", "'HS256' is not one of"),
        ("TOOLNEXUS_JWT_JWKS_URL", "file:///etc/passwd", "http:// or https://"),
        ("TOOLNEXUS_JWT_KEY", "@/no/such/key.pem", "cannot read"),
        ("TOOLNEXUS_ALLOWED_ORIGINS", "evil.example", "not an origin"),
        ("TOOLNEXUS_ALLOWED_ORIGINS", "https://app.example/path", "not an origin"),
        ("TOOLNEXUS_ALLOWED_HOSTS", "http://agent.example", "not a host name"),
    ],
)
def test_bad_security_settings_name_their_variable(variable: str, value: str, said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings.from_env({variable: value})
    assert str(caught.value).startswith(f"{variable}=") and said in str(caught.value)


def test_jwt_settings_need_issuer_and_audience_and_one_key_source() -> None:
    for env in (
        {"TOOLNEXUS_JWT_JWKS_URL": "https://idp.example/jwks", "TOOLNEXUS_JWT_ISSUER": "i"},
        {"TOOLNEXUS_JWT_KEY": "k", "TOOLNEXUS_JWT_AUDIENCE": "a"},
        {
            "TOOLNEXUS_JWT_JWKS_URL": "https://idp.example/jwks",
            "TOOLNEXUS_JWT_KEY": "k",
            "TOOLNEXUS_JWT_ISSUER": "i",
            "TOOLNEXUS_JWT_AUDIENCE": "a",
        },
    ):
        with pytest.raises(ConfigError):
            Settings.from_env(env)


# --- JWTs: a static key ------------------------------------------------------------------


@pytest.fixture(scope="module")
def signer() -> Issuer:
    return Issuer()  # not served: its public key is configured directly


@pytest.fixture
def key_client(signer: Issuer, tmp_path: Path) -> FlaskClient:
    pem = tmp_path / "issuer.pem"
    pem.write_text(signer.public_pem)
    settings = Settings.from_env(
        {
            "TOOLNEXUS_JWT_KEY": f"@{pem}",
            "TOOLNEXUS_JWT_ISSUER": ISSUER,
            "TOOLNEXUS_JWT_AUDIENCE": AUDIENCE,
        }
    )
    return client_for(settings)


def test_a_static_key_verifies_tokens_and_names_the_caller(
    key_client: FlaskClient, signer: Issuer
) -> None:
    status, reply = send(key_client, signer.token("alice"))
    assert status == 200, reply
    task_id = reply["result"]["task"]["id"]
    assert post(key_client, "GetTask", {"id": task_id}, signer.token("alice"))[0] == 200
    _, stranger = post(key_client, "GetTask", {"id": task_id}, signer.token("bob"))
    assert stranger["error"]["code"] == -32001


def forged_tokens(signer: Issuer) -> dict[str, str]:
    claims = {"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "exp": 2**31}
    public = signer.public_pem.encode()
    header, payload, _ = signer.token("alice").split(".")
    unsigned = jwt.api_jws.base64url_encode(json.dumps({"alg": "none"}).encode()).decode()
    return {
        "alg none": f"{unsigned}.{payload}.",
        "signature of another token": f"{header}.{payload}.{'A' * 342}",
        "HS256 keyed with the public key": _hmac_with(public, claims),
        "another key": Issuer().token("alice"),
        "wrong audience": signer.token("alice", aud="someone-else"),
        "no expiry": jwt.encode(
            {k: v for k, v in claims.items() if k != "exp"}, signer.key, algorithm="RS256"
        ),
        "subject not a string": signer.token(None, sub=12),
        "an empty subject": signer.token(""),
    }


def _hmac_with(secret: bytes, claims: dict[str, Any]) -> str:
    """An HS256 token keyed with `secret`, signed by hand: PyJWT itself
    refuses to use a PEM as an HMAC secret (the classic confusion attack)."""
    import hashlib
    import hmac

    encode = jwt.api_jws.base64url_encode
    head = encode(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = encode(json.dumps(claims).encode())
    signature = hmac.new(secret, head + b"." + body, hashlib.sha256).digest()
    return (head + b"." + body + b"." + encode(signature)).decode()


def test_forged_and_misaddressed_tokens_are_401(key_client: FlaskClient, signer: Issuer) -> None:
    for name, token in forged_tokens(signer).items():
        status, reply = send(key_client, token)
        assert status == 401, (name, reply)
        assert reply["error"]["code"] == -32000, (name, reply)
    _, listed = post(key_client, "ListTasks", {}, signer.token("alice"))
    assert listed["result"]["tasks"] == []  # nothing was created by any of them


# --- JWTs: a JWK set over HTTP -------------------------------------------------------------


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    served = Issuer().serve()
    yield served
    served.close()


def test_jwks_down_is_503_and_recovers(issuer: Issuer) -> None:
    """A key set that cannot be fetched is the service's trouble (503,
    -32603), not the caller's (401); once it answers again, tokens pass."""
    port = issuer.port
    issuer.close()
    client = client_for(Settings.from_env(issuer.env()))
    status, reply = send(client, issuer.token("alice"))
    assert status == 503, reply
    assert reply["error"]["code"] == -32603
    assert "key set is unavailable" in reply["error"]["message"]
    issuer.serve(port)
    status, reply = send(client, issuer.token("alice"))
    assert status == 200 and "task" in reply["result"], reply
    assert issuer.fetches == 1


def test_the_card_declares_the_jwt_scheme_in_both_generations(issuer: Issuer) -> None:
    client = client_for(Settings.from_env({**issuer.env(), "TOOLNEXUS_API_TOKENS": "tok"}))
    strict = client.get("/.well-known/agent-card.json", headers={"A2A-Version": "1.0"}).get_json()
    scheme = strict["securitySchemes"]["jwt"]["httpAuthSecurityScheme"]
    assert scheme["bearerFormat"] == "JWT" and scheme["scheme"] == "bearer"
    assert {"schemes": {"jwt": {"list": []}}} in strict["securityRequirements"]
    assert {"schemes": {"bearer": {"list": []}}} in strict["securityRequirements"]
    json_format.ParseDict(strict, AgentCard(), ignore_unknown_fields=False)
    # The default card carries both generations' forms, and the SDK reads it.
    for card in (
        client.get("/.well-known/agent-card.json").get_json(),
        client.get("/.well-known/agent-card.json", headers={"A2A-Version": "0.3"}).get_json(),
    ):
        assert card["securitySchemes"]["jwt"]["bearerFormat"] == "JWT"
        assert card["security"] == [{"bearer": []}, {"jwt": []}]
        assert {"schemes": {"jwt": {"list": []}}} in card["securityRequirements"]
        parsed = parse_agent_card(card)
        assert parsed.security_schemes["jwt"].http_auth_security_scheme.bearer_format == "JWT"


# --- Host names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("localhost", "localhost"),
        ("LocalHost:8080", "localhost"),
        ("127.0.0.1:80", "127.0.0.1"),
        ("[::1]:8080", "::1"),
        ("agent.example.com", "agent.example.com"),
        ("", None),
        ("a b", None),
        ("[::1", None),
        ("[nope]:1", None),
        ("host:port", None),
        ("host:99999999", None),
        ("evil.example/x", None),
        ("user@evil.example", None),
        ("x:1:2", None),
    ],
)
def test_host_names_are_parsed_strictly(header: str, name: str | None) -> None:
    assert host_name(header) == name
