"""Bearer JWTs: verified with PyJWT against a JWKS URL or one public key.

A token is accepted when its signature checks out with a key of the
configured issuer (TOOLNEXUS_JWT_JWKS_URL, fetched and cached by PyJWT's
JWKS client, refetched when a token names a key it has not seen; or
TOOLNEXUS_JWT_KEY), its algorithm is one of TOOLNEXUS_JWT_ALGORITHMS, it
has not expired, and `iss` and `aud` are the configured ones. The caller's
principal is `jwt:` plus the claim TOOLNEXUS_JWT_PRINCIPAL_CLAIM names
(`sub` by default): the prefix keeps a token's name (which cannot hold a
colon) and a JWT subject from ever naming the same owner.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from shared.errors import ConfigError
from shared.quoting import truncated
from shared.settings import Settings
from web.core.errors import AuthUnavailable, Unauthorized

log = logging.getLogger(__name__)

PRINCIPAL_PREFIX: Final = "jwt:"
# Small clock differences between the issuer and this host are not expiry.
LEEWAY_SECONDS: Final = 30
JWKS_TIMEOUT_SECONDS: Final = 5
# How long fetched keys are trusted before the set is read again.
JWKS_LIFESPAN_SECONDS: Final = 300
MAX_PRINCIPAL_LENGTH: Final = 256


class JwtVerifier:
    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        algorithms: tuple[str, ...],
        claim: str,
        jwks_url: str | None = None,
        key: Any = None,
    ) -> None:
        self.issuer = issuer
        self.audience = audience
        self.algorithms = list(algorithms)
        self.claim = claim
        self._key = key
        # PyJWT is imported by a process that verifies JWTs, not at every start.
        from jwt import PyJWKClient

        self._jwks = (
            PyJWKClient(
                jwks_url,
                cache_keys=True,
                lifespan=JWKS_LIFESPAN_SECONDS,
                timeout=JWKS_TIMEOUT_SECONDS,
            )
            if jwks_url
            else None
        )

    def principal(self, token: str) -> str:
        """The principal `token` names; Unauthorized if it is not a valid
        token of the issuer for this audience, AuthUnavailable if the key set
        cannot be fetched."""
        import jwt

        try:
            key = self._signing_key(token)
            claims = jwt.decode(
                token,
                key,
                algorithms=self.algorithms,
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "aud", self.claim]},
            )
        except jwt.PyJWKClientConnectionError as error:
            log.warning("JWT: cannot fetch the key set: %s", error)
            raise AuthUnavailable(
                "cannot verify the token now: the key set is unavailable"
            ) from None
        except (jwt.PyJWTError, jwt.PyJWKClientError) as error:
            raise Unauthorized(f"invalid bearer token: {truncated(str(error), 120)}") from None
        subject = claims.get(self.claim)
        if not isinstance(subject, str) or not subject or len(subject) > MAX_PRINCIPAL_LENGTH:
            raise Unauthorized(f"invalid bearer token: claim {self.claim!r} names no caller")
        return PRINCIPAL_PREFIX + subject

    def _signing_key(self, token: str) -> Any:
        if self._jwks is None:
            return self._key
        return self._jwks.get_signing_key_from_jwt(token).key


def looks_like_jwt(token: str) -> bool:
    """Three base64url segments: worth verifying as a JWT."""
    return token.count(".") == 2 and all(token.split("."))


def verifier_for(settings: Settings) -> JwtVerifier | None:
    """The verifier the settings describe, or None without JWT settings.
    A key that does not load stops start-up (ConfigError, one line)."""
    if not (settings.jwt_jwks_url or settings.jwt_key):
        return None
    assert settings.jwt_issuer and settings.jwt_audience  # Settings insists
    key = _public_key(settings.jwt_key) if settings.jwt_key else None
    return JwtVerifier(
        issuer=settings.jwt_issuer,
        audience=settings.jwt_audience,
        algorithms=settings.jwt_algorithms,
        claim=settings.jwt_principal_claim,
        jwks_url=settings.jwt_jwks_url,
        key=key,
    )


def _public_key(pem: str) -> Any:
    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    try:
        return load_pem_public_key(pem.strip().encode())
    except (ValueError, TypeError) as error:
        raise ConfigError(
            f"TOOLNEXUS_JWT_KEY: not a PEM public key ({truncated(str(error), 80)})"
        ) from None
