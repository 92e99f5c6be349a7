"""A token issuer for the tests: its own RSA key, its JWK set served over
real HTTP on a free port, and signed JWTs for any subject."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

ISSUER = "https://issuer.test.example"
AUDIENCE = "toolnexus-tests"


class Issuer:
    """Signs tokens; `serve()` publishes the public key at `jwks_url`."""

    def __init__(self, issuer: str = ISSUER, audience: str = AUDIENCE) -> None:
        self.issuer = issuer
        self.audience = audience
        self.kid = uuid.uuid4().hex[:12]
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.fetches = 0
        self._server: ThreadingHTTPServer | None = None

    @property
    def public_pem(self) -> str:
        return (
            self.key.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
        )

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": self.kid, "alg": "RS256", "use": "sig"}]}

    def token(self, subject: str | None, *, lifetime: float = 600, **claims: Any) -> str:
        now = int(time.time())
        payload: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.audience,
            "iat": now,
            "exp": now + int(lifetime),
            **claims,
        }
        if subject is not None:
            payload["sub"] = subject
        return jwt.encode(payload, self.key, algorithm="RS256", headers={"kid": self.kid})

    def headers(self, subject: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(subject)}"}

    def env(self) -> dict[str, str]:
        """The TOOLNEXUS_* settings of a service that trusts this issuer's JWKS."""
        return {
            "TOOLNEXUS_JWT_JWKS_URL": self.jwks_url,
            "TOOLNEXUS_JWT_ISSUER": self.issuer,
            "TOOLNEXUS_JWT_AUDIENCE": self.audience,
        }

    # --- the JWKS endpoint ----------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None, "serve() first"
        return int(self._server.server_address[1])

    @property
    def jwks_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/.well-known/jwks.json"

    def serve(self, port: int = 0) -> Issuer:
        """Publish the key set on `port` (0: a free one); again after `close`."""
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/.well-known/jwks.json":
                    self.send_error(404)
                    return
                issuer.fetches += 1
                body = json.dumps(issuer.jwks()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
