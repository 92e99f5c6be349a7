"""The console's turn counts (`GET /console/api/turns`, web/console/turns.py)
through a real HTTP front end: each caller sees only its own tasks waiting
for their turn (held) and taken (in flight), an administrator
(TOOLNEXUS_ADMIN_TOKENS) every owner's, and a caller without a valid token
the API's own refusal.

The front end runs on the memory store with a broker that takes messages
and runs nothing, and no worker has registered its slots: the turn book's
window is then one task, so the first task sent is taken and every later
one is held. What the browser shows of it: tests/test_console_browser.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from shared import Settings, memory_store
from tests.test_web_support import NoBroker, live_server
from web import create_app

TOKENS = {"alice-owner": "tok-alice", "bob-owner": "tok-bob", "root-admin": "tok-root"}
TURNS = "/console/api/turns"


def settings(**given: Any) -> Settings:
    tokens = tuple(f"{name}:{token}" for name, token in TOKENS.items())
    return Settings(console=True, api_tokens=tokens, admin_tokens=("root-admin",), **given)


@pytest.fixture
def served() -> Iterator[str]:
    app = create_app(settings(), store=memory_store(), dispatcher=NoBroker())
    with live_server(app) as (base, _):
        yield base


def send(base: str, who: str, text: str = "hello") -> str:
    message = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": [{"text": text}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    body["params"]["configuration"] = {"returnImmediately": True}
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {TOKENS[who]}"}
    reply = requests.post(f"{base}/", json=body, headers=headers, timeout=10).json()
    return str(reply["result"]["task"]["id"])


def cancel(base: str, who: str, task_id: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": task_id}}
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {TOKENS[who]}"}
    reply = requests.post(f"{base}/", json=body, headers=headers, timeout=10).json()
    assert reply["result"]["status"]["state"] == "TASK_STATE_CANCELED", reply


def turns(base: str, who: str | None) -> requests.Response:
    headers = {"Authorization": f"Bearer {TOKENS[who]}"} if who else {}
    return requests.get(f"{base}{TURNS}", headers=headers, timeout=10)


def test_each_caller_sees_its_own_counts_and_only_an_administrator_sees_every_owners(
    served: str,
) -> None:
    alices = [send(served, "alice-owner") for _ in range(3)]
    bobs = [send(served, "bob-owner") for _ in range(2)]
    assert alices and bobs
    # The window is one task: Alice's first is taken, every other one is held.
    alice = turns(served, "alice-owner")
    assert alice.status_code == 200
    assert alice.json() == {"turns": True, "owner": {"held": 2, "inFlight": 1}}
    assert alice.headers["Cache-Control"] == "no-store"
    bob = turns(served, "bob-owner")
    assert bob.json() == {"turns": True, "owner": {"held": 2, "inFlight": 0}}
    # Neither answer names, or counts, the other owner.
    assert "bob-owner" not in alice.text and "alice-owner" not in bob.text
    assert "owners" not in alice.json() and "capacity" not in bob.json()
    admin = turns(served, "root-admin").json()
    assert admin["admin"] is True and admin["owner"] == {"held": 0, "inFlight": 0}
    assert admin["owners"] == {
        "alice-owner": {"held": 2, "inFlight": 1},
        "bob-owner": {"held": 2, "inFlight": 0},
    }
    assert admin["capacity"] == 0  # no worker has registered its slots
    assert admin["oldestHeld"].endswith("Z")
    # The counts follow the book: a canceled held task leaves it.
    cancel(served, "bob-owner", bobs[-1])
    assert turns(served, "bob-owner").json()["owner"] == {"held": 1, "inFlight": 0}
    assert turns(served, "alice-owner").json()["owner"] == {"held": 2, "inFlight": 1}


def test_without_a_valid_token_the_answer_is_the_apis_refusal(served: str) -> None:
    send(served, "alice-owner")
    api = requests.get(f"{served}/tasks", headers={"A2A-Version": "1.0"}, timeout=10)
    for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic x"}):
        refused = requests.get(f"{served}{TURNS}", headers=headers, timeout=10)
        assert refused.status_code == 401 == api.status_code
        assert refused.headers["WWW-Authenticate"] == api.headers["WWW-Authenticate"]
        error = refused.json()["error"]
        assert error["status"] == api.json()["error"]["status"] == "UNAUTHENTICATED"
        assert "alice-owner" not in refused.text and "held" not in refused.text


def test_with_turns_off_the_answer_says_so_and_nothing_else() -> None:
    app = create_app(settings(fair_share=False), store=memory_store(), dispatcher=NoBroker())
    with live_server(app) as (base, _):
        send(base, "alice-owner")
        for who in ("alice-owner", "root-admin"):
            assert turns(base, who).json() == {"turns": False}
        assert turns(base, None).status_code == 401


def test_on_an_open_api_no_caller_is_an_administrator() -> None:
    """Without tokens every caller is the one anonymous principal: its own
    counts are everyone's, and no setting makes it see more."""
    open_api = Settings(console=True, admin_tokens=("root-admin",))
    app = create_app(open_api, store=memory_store(), dispatcher=NoBroker())
    with live_server(app) as (base, _):
        message = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": [{"text": "x"}]}
        params = {"message": message, "configuration": {"returnImmediately": True}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
        requests.post(f"{base}/", json=body, headers={"A2A-Version": "1.0"}, timeout=10)
        answer = requests.get(f"{base}{TURNS}", timeout=10).json()
        assert answer == {"turns": True, "owner": {"held": 0, "inFlight": 1}}


def test_the_administrators_are_read_as_a_list_of_principals() -> None:
    read = Settings.from_env({"TOOLNEXUS_ADMIN_TOKENS": " root-admin , jwt:ops ,"})
    assert read.admin_tokens == ("root-admin", "jwt:ops")
    assert Settings.from_env({}).admin_tokens == ()
