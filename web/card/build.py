"""The agent card served at `/.well-known/agent-card.json`.

Three generations of client read the same path: the toolnexus client and
A2A 0.3 clients take the endpoint from the top-level `url` (with
`preferredTransport` and `protocolVersion`), A2A 1.0 clients from
`supportedInterfaces`. The 1.0 specification says implementations SHOULD
ignore fields they do not recognise, so, as the official SDK does by
default, the card carries both: the 1.0 card with the 0.3 fields laid over
it (a field both define keeps its 1.0 value; security schemes hold both
forms). Which card a request gets:

- no version, `A2A-Version: 0.3` (header or query), or the 0.2-era path
  `/.well-known/agent.json`: that card, readable by all three;
- `A2A-Version: 1.0`: the 1.0 card alone;
- no version with TOOLNEXUS_CARD_COMPAT=1.0: the 1.0 card alone too, for
  deployments whose readers validate the card against the 1.0 JSON schema
  and refuse unknown fields (the 1.0 kit's CARD-STRUCT-001 does).

`supportedInterfaces` lists the one JSON-RPC endpoint under 1.0 and 0.3,
from which clients of either generation pick theirs, then the HTTP+JSON
binding (1.0) at the same base URL, and the gRPC binding (1.0) at
TOOLNEXUS_GRPC_URL when that is set (`web.grpc.server` serves it); then the
same bindings again under the A2A 1.1 draft. The public card lists the
bindings TOOLNEXUS_CARD_BINDINGS names (all, by default); the extended card
lists every one served.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from shared.codec import encode
from shared.dialects import V03, V10, V11
from shared.settings import CARD_BINDINGS, Settings
from web.card.skills import Skill

TRANSPORT, HTTP_JSON_BINDING, GRPC_BINDING = CARD_BINDINGS
PROTOCOL_V03: Final = "0.3.0"
INTERFACE_VERSIONS: Final = (V10, V03)
# How long a client or cache may keep the card before asking again.
MAX_AGE: Final = 300


def build_card(
    settings: Settings,
    skills: Sequence[Skill],
    url: str,
    *,
    streaming: bool,
    push: bool = False,
    security: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    extended: bool = False,
    bindings: Collection[str] = CARD_BINDINGS,
) -> dict[str, Any]:
    """The 1.0 card for the endpoint at `url`. `security` maps scheme names to
    `{"type": "http", "scheme": "bearer", ...}` (the OpenAPI form both
    generations derive theirs from); `overrides` replace top-level fields;
    `extended`: an extended card is offered to authenticated callers;
    `bindings`: the served bindings the card lists (the others are served
    all the same)."""
    url = url.rstrip("/") + "/"
    interfaces = [
        {"url": url, "protocolBinding": TRANSPORT, "protocolVersion": version}
        for version in INTERFACE_VERSIONS
    ]
    # The HTTP+JSON routes hang off the same base (`web.rest.binding`), 1.0 only.
    interfaces.append(
        {"url": url.rstrip("/"), "protocolBinding": HTTP_JSON_BINDING, "protocolVersion": V10}
    )
    if settings.grpc_url:
        interfaces.append(
            {"url": settings.grpc_url, "protocolBinding": GRPC_BINDING, "protocolVersion": V10}
        )
    # The 1.1 draft's interfaces come last: a client picking the first it
    # speaks (the official SDKs prefer 1.0) goes on as it did.
    interfaces += [
        {"url": url, "protocolBinding": TRANSPORT, "protocolVersion": V11},
        {"url": url.rstrip("/"), "protocolBinding": HTTP_JSON_BINDING, "protocolVersion": V11},
    ]
    if settings.grpc_url:
        interfaces.append(
            {"url": settings.grpc_url, "protocolBinding": GRPC_BINDING, "protocolVersion": V11}
        )
    interfaces = [each for each in interfaces if each["protocolBinding"] in bindings]
    capabilities: dict[str, Any] = {"streaming": streaming, "pushNotifications": push}
    if extended:
        capabilities["extendedAgentCard"] = True
    card: dict[str, Any] = {
        "name": settings.name,
        "description": settings.description,
        "version": settings.version,
        "supportedInterfaces": interfaces,
        "capabilities": capabilities,
        "defaultInputModes": list(settings.input_modes),
        "defaultOutputModes": list(settings.output_modes),
        "skills": [skill.card_entry() for skill in skills],
    }
    if settings.provider_organization or settings.provider_url:
        card["provider"] = {
            "organization": settings.provider_organization or "",
            "url": settings.provider_url or "",
        }
    if security:
        card["securitySchemes"] = {
            name: {"httpAuthSecurityScheme": _http_scheme(scheme)}
            for name, scheme in security.items()
        }
        card["securityRequirements"] = [{"schemes": {name: {"list": []}}} for name in security]
    if overrides:
        card.update(overrides)
    return card


def with_v03_fields(card: Mapping[str, Any], security: Mapping[str, Any] | None) -> dict[str, Any]:
    """`card` plus what an A2A 0.3 client reads: the endpoint and transport at
    the top level, and the OpenAPI form of the security schemes."""
    interfaces = card.get("supportedInterfaces") or [{}]
    legacy = next((i for i in interfaces if i.get("protocolVersion") == V03), interfaces[0])
    merged = {
        **card,
        "protocolVersion": PROTOCOL_V03,
        "url": legacy.get("url", ""),
        "preferredTransport": legacy.get("protocolBinding", TRANSPORT),
    }
    if security:
        merged["securitySchemes"] = {
            name: {**card.get("securitySchemes", {}).get(name, {}), **scheme}
            for name, scheme in security.items()
        }
        merged["security"] = [{name: []} for name in security]
    return merged


def wanted_version(requested: str | None, legacy_path: bool, compat: str | None) -> str:
    """Which card a request gets (see the module docstring): V03 is the card
    with the 0.3 fields, V10 the 1.0 card alone."""
    if requested in (V03, V10):
        return requested
    if legacy_path:
        return V03
    return compat or V03


def entity_tag(card: Mapping[str, Any]) -> str:
    """A strong validator of the card's content (unquoted, as werkzeug keeps it)."""
    return hashlib.sha256(encode(card).encode()).hexdigest()[:32]


def _http_scheme(scheme: Mapping[str, Any]) -> dict[str, Any]:
    shaped = {"scheme": scheme.get("scheme", "bearer")}
    for name in ("bearerFormat", "description"):
        if name in scheme:
            shaped[name] = scheme[name]
    return shaped
