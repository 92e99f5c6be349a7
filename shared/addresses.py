"""This machine's own names, for a server bound to every interface.

A server bound to `0.0.0.0` (or `::`) is reached by this machine's host
name and addresses, never by "0.0.0.0": the start-up line prints URLs built
from these, and the Host check serves them as it serves loopback. None of
them is a name a web page's attacker controls (a rebinding domain arrives as
its own name in `Host`, and is still refused).

The sockets servers listen and answer on are set up here too:
`listening_socket` for the embedded server's port, `no_delay` on every
connection a server of the project accepts.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from functools import cache
from typing import Final

WILDCARD_ADDRESSES: Final = frozenset({"", "0.0.0.0", "::", "[::]"})
# Routing a UDP socket towards this address sends nothing; it only makes the
# kernel pick the address this machine would use to leave it (TEST-NET-1).
_ROUTE_PROBE: Final = ("192.0.2.1", 9)


def is_wildcard(host: str) -> bool:
    return host.strip().lower() in WILDCARD_ADDRESSES


@cache
def own_names() -> tuple[str, ...]:
    """This machine's host names and addresses (lowercase, loopback last),
    as far as it can tell without asking a DNS server for more than itself."""
    names: list[str] = []

    def add(name: str) -> None:
        name = name.strip().lower()
        if name and name not in names and not name.startswith("localhost"):
            names.append(name)

    hostname = socket.gethostname()
    add(hostname)
    add(socket.getfqdn(hostname))
    try:
        for *_, address in socket.getaddrinfo(hostname, None, proto=socket.IPPROTO_TCP):
            add(str(address[0]))
    except OSError:  # a host name that does not resolve: the route below may still tell
        pass
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(_ROUTE_PROBE)
            add(probe.getsockname()[0])
    except OSError:  # no route out: loopback only
        pass
    return tuple(sorted(names, key=_is_loopback))


def usable_urls(host: str, port: int) -> list[str]:
    """The URLs a client can use for a server bound to `host`:`port`."""
    if not is_wildcard(host):
        shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
        return [f"http://{shown}:{port}/"]
    ipv4_only = host.strip() in ("", "0.0.0.0")
    hosts = ["127.0.0.1"]
    hosts += [
        name for name in own_names() if not _is_loopback(name) and not (ipv4_only and ":" in name)
    ]
    return [f"http://{f'[{name}]' if ':' in name else name}:{port}/" for name in hosts]


def _is_loopback(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class PortInUse(OSError):
    """The port is taken: one line saying so, for every role that listens."""


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` and listening, with TCP_NODELAY set;
    PortInUse when another process (most likely another toolnexus-serve)
    holds the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        listener = socket.create_server((host.strip("[]"), port), family=family, backlog=1024)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise PortInUse(f"port {port} on {host} is in use (another toolnexus-serve?)") from None
        raise OSError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    # On the listener too: Linux gives every connection it accepts the
    # listener's TCP_NODELAY, so a connection has it from its first byte.
    no_delay(listener)
    return listener


def no_delay(connection: socket.socket) -> None:
    """TCP_NODELAY on a TCP socket (IPv4 or IPv6); a Unix socket is left as it is.

    A response leaves in more than one write (its head, then its body or an
    event), and with Nagle's algorithm on, the last small write waits for the
    client to acknowledge the first, which a client delaying its ACKs holds
    back: every request after the first on a keep-alive connection, and every
    event of a stream, would wait for that delayed ACK.
    """
    if connection.family in (socket.AF_INET, socket.AF_INET6):
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
