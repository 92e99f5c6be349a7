"""What a web browser may do here: which `Host` names are served, which
pages (origins) may call, and the CORS headers that tell browsers so.

- **Host.** A page on `evil.example` whose name an attacker re-points at
  127.0.0.1 (DNS rebinding) reaches a loopback server with `Host:
  evil.example`. A strict server (the embedded one, or any with
  TOOLNEXUS_ALLOWED_HOSTS set) answers only to loopback names, the
  configured names, the host of TOOLNEXUS_URL and the address it was told
  to bind; anything else, or a malformed Host, is refused (HTTP 400),
  except on the health endpoints, which probes call by address.
- **Origin.** A browser names the page behind every cross-origin request in
  `Origin`. `POST /` from an origin not in TOOLNEXUS_ALLOWED_ORIGINS is
  refused (HTTP 403) before anything is read or stored, whatever its
  Content-Type; clients that are not browsers send no Origin.
- **Own pages.** With the console on (`web.console.views`), its pages call
  `POST /` from this server's own origin: a request whose Origin names the
  Host it was sent to is allowed when that Host is a trusted name (so a
  rebound name still gets 403).
- **CORS.** For an allowed origin every reply carries
  `Access-Control-Allow-Origin` and a preflight `OPTIONS` is answered, so
  a deployment can serve browser clients on purpose.
- **Base URL.** The card's URL is TOOLNEXUS_URL, or the request's Host when
  that is a trusted name, else the address the server listens on: never an
  unchecked Host or X-Forwarded-Host.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection
from dataclasses import dataclass
from functools import lru_cache
from typing import Final
from urllib.parse import urlsplit

from werkzeug.wrappers import Response

from shared.addresses import is_wildcard, own_names
from shared.quoting import shown
from shared.settings import Settings
from web.core.errors import HostNotAllowed, OriginNotAllowed
from web.http.wsgi import HttpRequest

ANY: Final = "*"
ALLOWED_METHODS: Final = "GET, POST, DELETE, OPTIONS"
ALLOWED_HEADERS: Final = "Authorization, Content-Type, A2A-Version, A2A-Extensions, Last-Event-ID"
EXPOSED_HEADERS: Final = "WWW-Authenticate, ETag"
PREFLIGHT_MAX_AGE: Final = "600"
UNSCREENED_PATHS: Final = frozenset({"/healthz", "/readyz"})
_NAME: Final = re.compile(r"[a-z0-9_]([a-z0-9_.-]{0,252}[a-z0-9_.])?")
_PORT: Final = re.compile(r"[0-9]{1,5}")


# Every request names its Host, and a server is called by a few names: each
# is read once. Bounded, so a peer sending a new name each time only churns it.
@lru_cache(maxsize=256)
def host_name(header: str | None) -> str | None:
    """The name in a `Host` value (lower case, IPv6 without brackets), or
    None when the value is not `name`, `name:port`, `[v6]` or `[v6]:port`."""
    text = (header or "").strip().lower()
    if text.startswith("["):
        name, bracket, rest = text[1:].partition("]")
        if not bracket:
            return None
        try:
            ipaddress.IPv6Address(name)
        except ValueError:
            return None
    else:
        name, colon, port = text.partition(":")
        rest = colon + port
        if not _NAME.fullmatch(name):
            return None
    if rest and not (rest.startswith(":") and _PORT.fullmatch(rest[1:])):
        return None
    return name


@lru_cache(maxsize=256)
def is_loopback(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class BrowserPolicy:
    hosts: frozenset[str]  # trusted besides loopback; may hold ANY
    origins: frozenset[str]  # may hold ANY
    strict_hosts: bool  # refuse requests to any other Host
    url: str | None  # TOOLNEXUS_URL
    own_pages: bool = False  # this server serves pages that call it (the console)

    def trusts(self, host: str | None) -> bool:
        name = host_name(host)
        if name is None:
            return False
        return ANY in self.hosts or name in self.hosts or is_loopback(name)

    def allows_origin(self, origin: str) -> bool:
        return ANY in self.origins or origin.lower().rstrip("/") in self.origins

    def screen(self, request: HttpRequest) -> Response | None:
        """Refuse (raise) a request this policy does not serve; answer a CORS
        preflight of an allowed origin; None: go on."""
        host = _host_header(request)
        # No Host at all (HTTP/1.0) is no rebinding: browsers always send one.
        # Health checks say nothing worth stealing, and probes call by address.
        screened = request.path not in UNSCREENED_PATHS and host is not None
        if self.strict_hosts and screened and not self.trusts(host):
            raise HostNotAllowed(
                f"Host {shown(host, 80)} is not served here:"
                " use a loopback address or a name in TOOLNEXUS_ALLOWED_HOSTS"
            )
        origin = request.headers.get("Origin")
        if origin is None:
            return None
        preflight = request.method == "OPTIONS"
        refused = not (self.allows_origin(origin) or self._is_own_page(origin, host))
        if (preflight or request.method == "POST") and refused:
            fix = (
                "add the name it is opened by to TOOLNEXUS_ALLOWED_HOSTS (or set TOOLNEXUS_URL)"
                " to serve the console there"
                if self.own_pages and _same_origin(origin, host)
                else "add its origin to TOOLNEXUS_ALLOWED_ORIGINS to serve browser clients"
            )
            raise OriginNotAllowed(
                f"requests from the page at {shown(origin, 80)} are not allowed: {fix}"
            )
        if preflight and request.headers.get("Access-Control-Request-Method"):
            answer = Response(status=204)
            answer.headers["Access-Control-Allow-Methods"] = ALLOWED_METHODS
            answer.headers["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
            answer.headers["Access-Control-Max-Age"] = PREFLIGHT_MAX_AGE
            return answer
        return None

    def _is_own_page(self, origin: str, host: str | None) -> bool:
        """A page this server served itself: same origin, on a trusted name."""
        return self.own_pages and _same_origin(origin, host) and self.trusts(host)

    def with_cors(self, request: HttpRequest, response: Response) -> Response:
        """`response` with the CORS headers an allowed origin gets."""
        if self.origins:
            response.vary.add("Origin")
        for name, value in self.cors_headers(request):
            response.headers[name] = value
        return response

    def cors_headers(self, request: HttpRequest) -> list[tuple[str, str]]:
        """The CORS headers of the answer to `request` (none when no origin is
        allowed; `Vary: Origin` goes with them when some are)."""
        if not self.origins:
            return []
        origin = request.headers.get("Origin")
        if origin is None or not self.allows_origin(origin):
            return []
        return [
            ("Access-Control-Allow-Origin", origin),
            ("Access-Control-Expose-Headers", EXPOSED_HEADERS),
        ]

    def base_url(self, request: HttpRequest) -> tuple[str, bool]:
        """The card's base URL, and whether it came from the request's Host."""
        if self.url:
            return self.url, False
        host = _host_header(request)
        if host is not None and self.trusts(host):
            return f"{request.scheme}://{host.strip().lower()}/", True
        return self._listening_url(request), False

    @staticmethod
    def _listening_url(request: HttpRequest) -> str:
        """The address the server listens on (werkzeug and gunicorn both set
        SERVER_NAME/PORT from the bound socket, not from the request)."""
        environ = request.environ
        name = str(environ.get("SERVER_NAME", ""))
        if is_wildcard(name):
            name = "localhost"
        elif ":" in name:
            name = f"[{name}]"
        port = str(environ.get("SERVER_PORT", ""))
        shown_port = "" if port in ("", "80") else f":{port}"
        return f"{request.scheme}://{name}{shown_port}/"


def _host_header(request: HttpRequest) -> str | None:
    """The Host the request names (werkzeug puts an absolute-form request
    target's host here too), as sent: never X-Forwarded-Host."""
    host = request.environ.get("HTTP_HOST")
    return host if isinstance(host, str) else None


def _same_origin(origin: str, host: str | None) -> bool:
    """The page's origin names the very host:port the request was sent to."""
    return host is not None and urlsplit(origin.strip()).netloc.lower() == host.strip().lower()


def browser_policy(settings: Settings, *, strict_hosts: bool) -> BrowserPolicy:
    """`strict_hosts`: refuse foreign Host names even without
    TOOLNEXUS_ALLOWED_HOSTS (the embedded server, on a developer's machine)."""
    return BrowserPolicy(
        hosts=frozenset(_trusted_names(settings)),
        origins=frozenset(settings.allowed_origins),
        strict_hosts=strict_hosts or bool(settings.allowed_hosts),
        url=settings.url,
        own_pages=settings.console,
    )


def _trusted_names(settings: Settings) -> Collection[str]:
    names = set(settings.allowed_hosts)
    if settings.url and (url_host := urlsplit(settings.url).hostname):
        names.add(url_host.lower())
    if is_wildcard(settings.host):
        # Bound to every interface: reached by this machine's own names.
        names.update(own_names())
    else:
        names.add(settings.host.lower().strip("[]"))
    return names
