"""Signed deliveries: a JWT per webhook POST, and the JWKS that verifies it.

With TOOLNEXUS_PUSH_SIGNING_KEY set, every POST carries `X-A2A-Signature:
<JWT>` with `iss` (the agent's URL, else its name), `aud` (the webhook URL
the POST goes to), `iat`, `exp` (five minutes on), `jti` (unique per POST,
so a receiver can refuse a replay) and `body_sha256` (hex SHA-256 of the
exact body bytes). Its header's `kid` names the key in the JWKS served at
`/.well-known/jwks.json` (RFC 7638 thumbprint), so keys can be rotated by
publishing the next one first.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any, Final

from shared.settings import Settings
from shared.signing_keys import load_signing_key

SIGNATURE_HEADER: Final = "X-A2A-Signature"
JWKS_PATH: Final = "/.well-known/jwks.json"
LIFETIME: Final = 300.0


class Signer:
    def __init__(self, pem: str, issuer: str) -> None:
        self._key = load_signing_key(pem, "TOOLNEXUS_PUSH_SIGNING_KEY")
        self._issuer = issuer
        self.algorithm = self._key.algorithm
        self.kid = self._key.kid

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self._key.jwk()]}

    def sign(self, url: str, body: bytes) -> str:
        import jwt  # here: a process whose deliveries are not signed never loads it

        now = int(time.time())
        claims = {
            "iss": self._issuer,
            "aud": url,
            "iat": now,
            "exp": now + int(LIFETIME),
            "jti": uuid.uuid4().hex,
            "body_sha256": hashlib.sha256(body).hexdigest(),
        }
        return jwt.encode(
            claims, self._key.private, algorithm=self.algorithm, headers={"kid": self.kid}
        )


def signer(settings: Settings) -> Signer | None:
    if not settings.push_signing_key:
        return None
    return Signer(settings.push_signing_key, settings.url or settings.name)
