"""A private key the service signs with, and the public key that verifies it.

Webhook POSTs (`shared.push.signing`) and the agent card (`web.card.signing`)
are signed with keys given as PEM, each in its own setting: an RSA key
(RS256) or an EC P-256 key (ES256). Each public key is published as a JWK
whose `kid` is its RFC 7638 thumbprint, so the same key always has the same
id and a rotation is a new id.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from shared.errors import ConfigError


@dataclass(frozen=True)
class SigningKey:
    private: Any  # the cryptography key object
    algorithm: str  # RS256 or ES256
    public: dict[str, Any]  # the public key as a JWK, without kid, use or alg
    kid: str

    def jwk(self) -> dict[str, Any]:
        """The public key as a JWKS publishes it."""
        return {**self.public, "kid": self.kid, "use": "sig", "alg": self.algorithm}


def load_signing_key(pem: str, setting: str) -> SigningKey:
    """The key in `pem`; a ConfigError naming `setting` when it is not one we sign with."""
    # Imported here: most processes sign nothing, and these cost a start-up
    # a tenth of a second.
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key
    from jwt.algorithms import ECAlgorithm, RSAAlgorithm

    try:
        key = load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{setting}: not a PEM private key ({error})") from None
    if isinstance(key, rsa.RSAPrivateKey):
        algorithm, public = "RS256", RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    elif isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1":
        algorithm, public = "ES256", ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    else:
        raise ConfigError(f"{setting}: use an RSA or an EC P-256 key")
    public = dict(public)
    return SigningKey(key, algorithm, public, _thumbprint(public))


def _thumbprint(public: dict[str, Any]) -> str:
    """RFC 7638: the SHA-256 of the key's required members, in order, no spaces."""
    members = ("e", "kty", "n") if public["kty"] == "RSA" else ("crv", "kty", "x", "y")
    canonical = json.dumps({m: public[m] for m in members}, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
