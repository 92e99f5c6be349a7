"""POST to a webhook, refusing what a server-side request must not reach.

Every connect resolves the host afresh and checks each address it is about
to connect to (not the name, not once at create time: a name can point
elsewhere by the next attempt); loopback, private, link-local, multicast,
reserved and unspecified addresses are refused unless the allow-list
(`TOOLNEXUS_PUSH_ALLOWED_HOSTS`: host names or CIDRs) names them. The
socket then connects to that checked address, so no second lookup can
swap it. Redirects are never followed (`http.client` follows none); a 3xx
is an answer like any other that is not a 2xx.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class Refused(Exception):
    """The webhook's address is one this service may not reach."""


@dataclass(frozen=True)
class Allowed:
    """TOOLNEXUS_PUSH_ALLOWED_HOSTS, parsed: names and networks."""

    names: frozenset[str]
    networks: tuple[Network, ...]

    @classmethod
    def parse(cls, entries: Sequence[str]) -> Allowed:
        names, networks = set(), []
        for entry in entries:
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                names.add(entry.lower().rstrip("."))
        return cls(frozenset(names), tuple(networks))

    def permits(self, host: str, address: Address) -> bool:
        if _public(address) or host.lower().rstrip(".") in self.names:
            return True
        return any(address in network for network in self.networks)


def _public(address: Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return not (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )


def guarded_socket(host: str, port: int, timeout: float, allowed: Allowed) -> socket.socket:
    """A TCP connection to the first address of `host` that is allowed and
    answers; Refused when none is allowed."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    refused: list[str] = []
    error: OSError | None = None
    for family, kind, proto, _, sockaddr in found:
        address = ipaddress.ip_address(sockaddr[0])
        if not allowed.permits(host, address):
            refused.append(str(address))
            continue
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(sockaddr)
        except OSError as failure:
            sock.close()
            error = failure
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock
    if error is not None:
        raise error
    raise Refused(
        f"{host} resolves to {', '.join(refused) or 'nothing'}: not a public address"
        " (TOOLNEXUS_PUSH_ALLOWED_HOSTS can allow it)"
    )


class _Guarded(http.client.HTTPConnection):
    def __init__(
        self, host: str, port: int | None, allowed: Allowed, connect: float, read: float
    ) -> None:
        super().__init__(host, port, timeout=connect)
        self._allowed = allowed
        self._connect_timeout = connect
        self._read_timeout = read

    def connect(self) -> None:
        self.sock = guarded_socket(self.host, self.port, self._connect_timeout, self._allowed)
        self.sock.settimeout(self._read_timeout)


class _GuardedTLS(_Guarded):
    default_port = http.client.HTTPS_PORT
    _tls = ssl.create_default_context()

    def connect(self) -> None:
        super().connect()
        self.sock = self._tls.wrap_socket(self.sock, server_hostname=self.host)


@dataclass(frozen=True)
class Answer:
    status: int
    retry_after: float | None  # seconds, from a Retry-After header in seconds


class Webhook:
    """One webhook URL, its connection kept open between POSTs."""

    def __init__(self, url: str, allowed: Allowed, connect: float, read: float) -> None:
        parts = urlsplit(url)
        kind = _GuardedTLS if parts.scheme.lower() == "https" else _Guarded
        self._connection = kind(parts.hostname or "", parts.port, allowed, connect, read)
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    def post(self, body: bytes, headers: Mapping[str, str]) -> Answer:
        """Raises Refused, or OSError / HTTPException when no answer came."""
        try:
            self._connection.request("POST", self._path, body, dict(headers))
            response = self._connection.getresponse()
            response.read()
        except BaseException:
            self._connection.close()
            raise
        if response.will_close:
            self._connection.close()
        return Answer(response.status, _seconds(response.getheader("Retry-After")))

    def close(self) -> None:
        self._connection.close()


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None  # an HTTP date: rare from webhooks; the backoff applies instead
    return seconds if seconds >= 0 else None
