"""Who is calling: bearer tokens (TOOLNEXUS_API_TOKENS) name a principal.

`TOOLNEXUS_API_TOKENS=alice:tok1,bob:tok2` names each token's caller; a
bare token is its own principal (named by a digest, never by the token).
Tasks belong to the principal that created them (see `web.methods`). With
no tokens configured every caller is the one anonymous principal "".

The agent card stays public either way and, when tokens are set, declares
the bearer scheme so clients know what to send.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared.errors import ConfigError
from web.errors import Unauthorized

SCHEME_NAME = "bearer"
ANONYMOUS = ""


@dataclass(frozen=True)
class Token:
    principal: str
    secret: bytes


def parse_tokens(entries: Sequence[str]) -> tuple[Token, ...]:
    """`name:token` or a bare `token` per entry. A name is what the tasks of
    its caller are filed under; a bare token gets a name derived from it."""
    tokens = []
    for entry in entries:
        name, colon, secret = entry.partition(":")
        if not colon:
            name, secret = "", entry
        name, secret = name.strip(), secret.strip()
        if not secret:
            raise ConfigError(f"TOOLNEXUS_API_TOKENS: the entry for {name!r} has no token")
        principal = name or "token-" + hashlib.sha256(secret.encode()).hexdigest()[:16]
        tokens.append(Token(principal, secret.encode()))
    return tuple(tokens)


class Authenticator:
    def __init__(self, tokens: Sequence[Token]) -> None:
        self.tokens = tuple(tokens)

    @property
    def required(self) -> bool:
        return bool(self.tokens)

    def principal(self, authorization: str | None) -> str:
        """The caller's principal; raises Unauthorized when tokens are required
        and `authorization` is not `Bearer <one of them>`."""
        if not self.tokens:
            return ANONYMOUS
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise Unauthorized("authentication required: send 'Authorization: Bearer <token>'")
        offered = given.strip().encode()
        # Compare against every token, in constant time, so timing leaks nothing.
        found = ANONYMOUS
        for token in self.tokens:
            if hmac.compare_digest(token.secret, offered):
                found = token.principal
        if not found:
            raise Unauthorized("invalid bearer token")
        return found

    def card_schemes(self) -> dict[str, Any]:
        """The schemes the card declares, in OpenAPI form (see `web.card`)."""
        if not self.tokens:
            return {}
        return {
            SCHEME_NAME: {
                "type": "http",
                "scheme": "bearer",
                "description": "Authorization: Bearer <token>",
            }
        }
