"""Who is calling: bearer tokens (TOOLNEXUS_API_TOKENS) or bearer JWTs name a principal.

`TOOLNEXUS_API_TOKENS=alice:tok1,bob:tok2` names each token's caller; a
bare token is its own principal (named by a digest, never by the token).
With TOOLNEXUS_JWT_* settings a signed JWT is accepted too (`web.auth.jwt_tokens`),
its principal `jwt:<sub>`. Tasks belong to the principal that created them
(see `web.core.tasks`). With neither configured every caller is the one
anonymous principal "".

The agent card stays public either way and, when tokens are set, declares
the bearer scheme so clients know what to send.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from shared.errors import ConfigError
from shared.settings import Settings
from web.auth.jwt_tokens import JwtVerifier, looks_like_jwt, verifier_for
from web.core.errors import Unauthorized

SCHEME_NAME = "bearer"
JWT_SCHEME_NAME = "jwt"
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


def administrators(authenticator: Authenticator, names: Collection[str]) -> frozenset[str]:
    """The principals named in TOOLNEXUS_ADMIN_TOKENS. Only a named principal
    can be one: never the open API's anonymous caller."""
    return frozenset(names) if authenticator.required else frozenset()


def authenticator_for(settings: Settings) -> Authenticator:
    return Authenticator(parse_tokens(settings.api_tokens), verifier_for(settings))


class Authenticator:
    def __init__(self, tokens: Sequence[Token], jwt: JwtVerifier | None = None) -> None:
        self.tokens = tuple(tokens)
        self.jwt = jwt

    @property
    def required(self) -> bool:
        return bool(self.tokens) or self.jwt is not None

    def principal(self, authorization: str | None) -> str:
        """The caller's principal; raises Unauthorized when auth is configured
        and `authorization` is not `Bearer <a token or a valid JWT>`."""
        if not self.required:
            return ANONYMOUS
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise Unauthorized("authentication required: send 'Authorization: Bearer <token>'")
        offered = given.strip()
        # Compare against every token, in constant time, so timing leaks nothing.
        found = ANONYMOUS
        for token in self.tokens:
            if hmac.compare_digest(token.secret, offered.encode()):
                found = token.principal
        if found:
            return found
        if self.jwt is not None and looks_like_jwt(offered):
            return self.jwt.principal(offered)
        raise Unauthorized("invalid bearer token")

    def card_schemes(self) -> dict[str, Any]:
        """The schemes the card declares, in OpenAPI form (see `web.card.build`);
        a caller may use any one of them."""
        schemes: dict[str, Any] = {}
        if self.tokens:
            schemes[SCHEME_NAME] = {
                "type": "http",
                "scheme": "bearer",
                "description": "Authorization: Bearer <token>",
            }
        if self.jwt is not None:
            schemes[JWT_SCHEME_NAME] = {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": (
                    f"Authorization: Bearer <JWT issued by {self.jwt.issuer}"
                    f" for audience {self.jwt.audience}>"
                ),
            }
        return schemes
