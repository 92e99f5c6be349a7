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

import base64
import hashlib
import json
import time
import uuid
from functools import cached_property
from typing import Any, Final

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.serialization import load_pem_private_key
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from shared.errors import ConfigError
from shared.settings import Settings

SIGNATURE_HEADER: Final = "X-A2A-Signature"
JWKS_PATH: Final = "/.well-known/jwks.json"
LIFETIME: Final = 300.0


class Signer:
    def __init__(self, pem: str, issuer: str) -> None:
        try:
            key = load_pem_private_key(pem.encode(), password=None)
        except (ValueError, TypeError) as error:
            raise ConfigError(
                f"TOOLNEXUS_PUSH_SIGNING_KEY: not a PEM private key ({error})"
            ) from None
        if isinstance(key, rsa.RSAPrivateKey):
            self.algorithm, public = "RS256", RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
        elif isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1":
            self.algorithm, public = "ES256", ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
        else:
            raise ConfigError("TOOLNEXUS_PUSH_SIGNING_KEY: use an RSA or an EC P-256 key")
        self._key = key
        self._issuer = issuer
        self._public: dict[str, Any] = dict(public)

    @cached_property
    def kid(self) -> str:
        members = ("e", "kty", "n") if self._public["kty"] == "RSA" else ("crv", "kty", "x", "y")
        canonical = json.dumps({m: self._public[m] for m in members}, separators=(",", ":"))
        digest = hashlib.sha256(canonical.encode()).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def jwks(self) -> dict[str, Any]:
        key = {**self._public, "kid": self.kid, "use": "sig", "alg": self.algorithm}
        return {"keys": [key]}

    def sign(self, url: str, body: bytes) -> str:
        now = int(time.time())
        claims = {
            "iss": self._issuer,
            "aud": url,
            "iat": now,
            "exp": now + int(LIFETIME),
            "jti": uuid.uuid4().hex,
            "body_sha256": hashlib.sha256(body).hexdigest(),
        }
        return jwt.encode(claims, self._key, algorithm=self.algorithm, headers={"kid": self.kid})


def signer(settings: Settings) -> Signer | None:
    if not settings.push_signing_key:
        return None
    return Signer(settings.push_signing_key, settings.url or settings.name)
