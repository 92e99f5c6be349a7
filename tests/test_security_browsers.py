"""The browser policy in process (`web.http.browsers`): what TOOLNEXUS_ALLOWED_HOSTS
and TOOLNEXUS_ALLOWED_ORIGINS change, for the app as gunicorn serves it
(strict only when names are configured) and as the embedded server does.
Over real HTTP: tests/test_security_embedded.py and test_security_deployment.py."""

from __future__ import annotations

import json
from typing import Any

from flask.testing import FlaskClient

from shared import Settings, memory_store
from tests.test_web_support import PlayingDispatcher, user_message
from web import create_app

CARD = "/.well-known/agent-card.json"


def client_for(settings: Settings, *, strict_hosts: bool = False) -> FlaskClient:
    store = memory_store()
    app = create_app(
        settings, store=store, dispatcher=PlayingDispatcher(store), strict_hosts=strict_hosts
    )
    return app.test_client()


def send(client: FlaskClient, **headers: str) -> Any:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                       "params": {"message": user_message()}})  # fmt: skip
    return client.post("/", data=body, headers={"Content-Type": "application/json", **headers})


def card_url(client: FlaskClient, host: str) -> str:
    response = client.get(CARD, headers={"Host": host})
    assert response.status_code == 200, response.data
    url: str = response.get_json()["supportedInterfaces"][0]["url"]
    return url


def test_without_configured_names_gunicorn_serves_any_host_but_never_advertises_it() -> None:
    client = client_for(Settings())
    assert send(client, Host="proxy-name.internal").status_code == 200
    assert card_url(client, "localhost:8080") == "http://localhost:8080/"
    assert "proxy-name" not in card_url(client, "proxy-name.internal")


def test_configured_names_make_every_server_strict() -> None:
    client = client_for(Settings(allowed_hosts=("agent.example.com",)))
    assert card_url(client, "agent.example.com") == "http://agent.example.com/"
    assert card_url(client, "127.0.0.1:9000") == "http://127.0.0.1:9000/"
    refused = send(client, Host="evil.example")
    assert refused.status_code == 400
    assert refused.get_json()["error"]["code"] == -32600
    assert client.get(CARD, headers={"Host": "evil.example"}).status_code == 400
    # Probes call by address: health answers on any Host.
    assert client.get("/healthz", headers={"Host": "10.1.2.3:8080"}).status_code == 200


def test_the_url_setting_names_the_card_and_a_trusted_host() -> None:
    client = client_for(Settings(url="https://agent.example.com/a2a/"), strict_hosts=True)
    assert card_url(client, "agent.example.com") == "https://agent.example.com/a2a/"
    assert card_url(client, "localhost") == "https://agent.example.com/a2a/"
    assert send(client, Host="other.example").status_code == 400


def test_any_host_when_asked_for() -> None:
    client = client_for(Settings(allowed_hosts=("*",)), strict_hosts=True)
    assert send(client, Host="anything.example").status_code == 200
    assert card_url(client, "anything.example") == "http://anything.example/"


def test_an_origin_is_refused_unless_allowed() -> None:
    closed = client_for(Settings())
    refused = send(closed, Origin="https://app.example.com")
    assert refused.status_code == 403 and refused.get_json()["error"]["code"] == -32600
    assert "Access-Control-Allow-Origin" not in refused.headers
    assert send(closed).status_code == 200  # no Origin: not a browser
    anyone = client_for(Settings(allowed_origins=("*",)))
    welcome = send(anyone, Origin="https://app.example.com")
    assert welcome.status_code == 200
    assert welcome.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert "Origin" in welcome.headers["Vary"]


def test_an_allowed_origin_reads_the_card_and_gets_a_preflight() -> None:
    client = client_for(Settings(allowed_origins=("https://app.example.com",)))
    card = client.get(CARD, headers={"Origin": "https://app.example.com"})
    assert card.headers["Access-Control-Allow-Origin"] == "https://app.example.com"
    assert {"A2A-Version", "Host", "Origin"} <= {v.strip() for v in card.headers["Vary"].split(",")}
    preflight = client.options(
        "/",
        headers={"Origin": "https://APP.example.com", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 204
    assert "A2A-Version" in preflight.headers["Access-Control-Allow-Headers"]
