"""Signed agent cards, verified by the official a2a-sdk client over real HTTP:
with TOOLNEXUS_CARD_SIGNING_KEY (EC P-256 and RSA), the card of every path
and dialect and the extended card carry a signature that the SDK's own
verifier accepts, with the key found by its `kid` in the JWKS this server
publishes; a card changed on the way (one field, by a proxy the test puts
in between) is refused by the same verifier; the signature holds still, so
the card's ETag does; without the setting there is no signature."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest
from a2a.client.card_resolver import A2ACardResolver, parse_agent_card
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from shared import ConfigError, Settings, memory_store
from tests.test_web_support import PlayingDispatcher, live_server
from web import create_app


def pem_of(key: Any) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


KEYS = {
    "ES256": lambda: pem_of(ec.generate_private_key(ec.SECP256R1())),
    "RS256": lambda: pem_of(rsa.generate_private_key(public_exponent=65537, key_size=2048)),
}


@pytest.fixture(params=sorted(KEYS))
def served(request: pytest.FixtureRequest) -> Iterator[str]:
    store = memory_store()
    settings = Settings(
        card_signing_key=KEYS[request.param](),
        extended_card={"description": "for callers past the bearer check"},
    )
    app = create_app(settings, store=store, dispatcher=PlayingDispatcher(store))
    with live_server(app) as (base, _):
        yield base


def verifier_for(base: str) -> Any:
    """The SDK's verifier, finding each key by kid in this server's JWKS."""
    keys = jwt.PyJWKClient(f"{base}/.well-known/jwks.json")

    def key(kid: str | None, jku: str | None) -> Any:
        assert jku is None  # the card names no key URL; the JWKS is at the well-known path
        return keys.get_signing_key(kid or "")

    return create_signature_verifier(key, ["ES256", "RS256"])


async def resolved(base: str, **asked: Any) -> Any:
    async with httpx.AsyncClient() as http:
        resolver = A2ACardResolver(http, base)
        return await resolver.get_agent_card(signature_verifier=verifier_for(base), **asked)


@pytest.mark.parametrize(
    "asked",
    [
        {},
        {"http_kwargs": {"headers": {"A2A-Version": "1.0"}}},
        {"http_kwargs": {"headers": {"A2A-Version": "0.3"}}},
        {"relative_card_path": "/.well-known/agent.json"},
    ],
    ids=["default", "1.0", "0.3-shaped", "legacy-path"],
)
def test_the_sdk_verifies_the_card_of_every_path_and_dialect(served: str, asked: Any) -> None:
    card = asyncio.run(resolved(served, **asked))
    assert card.signatures and card.name


def test_the_extended_card_is_signed_too(served: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}}
    for version in ("1.0", "0.3"):
        reply = httpx.post(f"{served}/", json=body, headers={"A2A-Version": version}).json()
        card = reply["result"]
        assert card["description"] == "for callers past the bearer check"
        verifier_for(served)(parse_agent_card(card))


def test_a_card_changed_on_the_way_is_refused(served: str) -> None:
    real = httpx.get(f"{served}/.well-known/agent-card.json", headers={"A2A-Version": "1.0"})
    for field, value in (("name", "impostor"), ("description", "changed by a proxy")):
        changed = {**real.json(), field: value}

        def proxy(request: httpx.Request, changed: Any = changed) -> httpx.Response:
            return httpx.Response(200, json=changed)

        async def fetch() -> Any:
            async with httpx.AsyncClient(transport=httpx.MockTransport(proxy)) as http:
                resolver = A2ACardResolver(http, served)
                return await resolver.get_agent_card(signature_verifier=verifier_for(served))

        with pytest.raises(InvalidSignaturesError):
            asyncio.run(fetch())


def test_the_signature_and_the_etag_hold_still(served: str) -> None:
    url = f"{served}/.well-known/agent-card.json"
    first, second = httpx.get(url), httpx.get(url)
    assert first.json()["signatures"] == second.json()["signatures"]
    assert first.headers["ETag"] == second.headers["ETag"]
    again = httpx.get(url, headers={"If-None-Match": first.headers["ETag"]})
    assert again.status_code == 304
    (signature,) = first.json()["signatures"]
    header = json.loads(jwt.utils.base64url_decode(signature["protected"]))
    published = httpx.get(f"{served}/.well-known/jwks.json").json()["keys"]
    assert set(header) == {"alg", "kid", "typ"} and header["typ"] == "JOSE"
    assert [key["kid"] for key in published] == [header["kid"]]
    assert "=" not in signature["protected"] + signature["signature"]


def test_without_the_setting_the_card_carries_no_signature() -> None:
    store = memory_store()
    app = create_app(Settings(push=False), store=store, dispatcher=PlayingDispatcher(store))
    with live_server(app) as (base, _):
        card = httpx.get(f"{base}/.well-known/agent-card.json").json()
        assert "signatures" not in card
        assert httpx.get(f"{base}/.well-known/jwks.json").status_code == 404


def test_a_key_that_cannot_sign_is_refused_at_start() -> None:
    store = memory_store()
    for given in ("not a key", pem_of(ec.generate_private_key(ec.SECP384R1()))):
        with pytest.raises(ConfigError, match="TOOLNEXUS_CARD_SIGNING_KEY"):
            create_app(
                Settings(card_signing_key=given), store=store, dispatcher=PlayingDispatcher(store)
            )
