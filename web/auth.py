"""Optional bearer-token auth for `POST /` (TOOLNEXUS_API_TOKENS).

With no tokens configured every request is let in. The agent card stays
public either way and, when tokens are set, declares the bearer scheme so
clients know what to send.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import Any

from web.errors import Unauthorized

SCHEME_NAME = "bearer"


def require_token(authorization: str | None, tokens: Sequence[str]) -> None:
    """Raise Unauthorized unless `authorization` is `Bearer <one of tokens>`."""
    if not tokens:
        return
    scheme, _, given = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise Unauthorized("authentication required: send 'Authorization: Bearer <token>'")
    offered = given.strip().encode()
    # Compare against every token, in constant time, so timing leaks nothing.
    matched = False
    for token in tokens:
        matched |= hmac.compare_digest(token.encode(), offered)
    if not matched:
        raise Unauthorized("invalid bearer token")


def card_security(tokens: Sequence[str]) -> dict[str, Any]:
    """The card fields declaring the scheme (A2A 0.3 form; 1.0 clients map it)."""
    if not tokens:
        return {}
    return {
        "securitySchemes": {
            SCHEME_NAME: {
                "type": "http",
                "scheme": "bearer",
                "description": "Authorization: Bearer <token>, a token from TOOLNEXUS_API_TOKENS",
            }
        },
        "security": [{SCHEME_NAME: []}],
    }
