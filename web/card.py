"""The agent card served at `/.well-known/agent-card.json` (and `agent.json`).

One document for both protocol generations: the A2A 0.3 fields (`url`,
`protocolVersion`, `preferredTransport`, `security`) that 0.3 clients read,
plus `supportedInterfaces` listing the one JSON-RPC endpoint under 1.0 and
0.3, from which 1.0 clients pick their version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shared.settings import Settings
from web.auth import card_security
from web.skills import Skill

PROTOCOL_VERSION = "0.3.0"
TRANSPORT = "JSONRPC"
INTERFACE_VERSIONS = ("1.0", "0.3")


def build_card(
    settings: Settings,
    skills: Sequence[Skill],
    request_base_url: str,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The card for a request that came in on `request_base_url`; the
    configured TOOLNEXUS_URL wins, since behind a proxy the request's own
    URL is not the one peers should use. `overrides` replace top-level fields."""
    url = (settings.url or request_base_url).rstrip("/") + "/"
    card: dict[str, Any] = {
        "protocolVersion": PROTOCOL_VERSION,
        "name": settings.name,
        "description": settings.description,
        "version": settings.version,
        "url": url,
        "preferredTransport": TRANSPORT,
        "supportedInterfaces": [
            {"url": url, "protocolBinding": TRANSPORT, "protocolVersion": version}
            for version in INTERFACE_VERSIONS
        ],
        "capabilities": {"streaming": False, "pushNotifications": False},
        "defaultInputModes": ["text"],
        "defaultOutputModes": ["text"],
        "skills": [skill.card_entry() for skill in skills],
        **card_security(settings.api_tokens),
    }
    if settings.provider_organization or settings.provider_url:
        card["provider"] = {
            "organization": settings.provider_organization or "",
            "url": settings.provider_url or "",
        }
    if overrides:
        card.update(overrides)
    return card
