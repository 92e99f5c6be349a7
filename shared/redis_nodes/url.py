"""The Sentinel URL form, read without importing redis.

`redis+sentinel://[user:password@]host1:26379,host2:26379/<master name>/<db>`
(or `rediss+sentinel://` for TLS to the master and the Sentinels): the
Sentinels to ask, the name of the master they watch, and the database
number. The password in the URL is the master's; Sentinel's own, when it
has one, is a setting apart (TOOLNEXUS_SENTINEL_PASSWORD), since managed
services and most deployments give the two different passwords.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote

SENTINEL_SCHEMES: Final = ("redis+sentinel://", "rediss+sentinel://")
SENTINEL_PORT: Final = 26379
FORM: Final = "redis+sentinel://[:password@]host1:26379,host2:26379/<master name>/<db>"


@dataclass(frozen=True)
class SentinelTarget:
    sentinels: tuple[tuple[str, int], ...]
    master: str
    db: int
    username: str | None
    password: str | None
    tls: bool

    def describe(self) -> str:
        """The master's name and the Sentinels, without the password."""
        hosts = ",".join(f"{host}:{port}" for host, port in self.sentinels)
        return f"master {self.master!r} via Sentinel {hosts}"


def is_sentinel(url: str) -> bool:
    return url.lower().startswith(SENTINEL_SCHEMES)


def parse_sentinel(url: str) -> SentinelTarget:
    """The parts of a Sentinel URL; ValueError saying what is wrong and the form."""
    scheme, _, rest = url.partition("://")
    if not is_sentinel(url):
        raise ValueError(f"not a Sentinel URL; use {FORM}")
    location, _, path = rest.partition("/")
    login, at, hosts = location.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = login.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    sentinels = tuple(_host_port(entry) for entry in hosts.split(","))
    master, _, db_text = path.partition("/")
    master = unquote(master)
    if not master:
        raise ValueError(f"names no master after the Sentinels; use {FORM}")
    db_text = db_text.strip("/") or "0"
    if not db_text.isdigit():
        raise ValueError(f"the database after the master's name must be a number; use {FORM}")
    return SentinelTarget(
        sentinels=sentinels,
        master=master,
        db=int(db_text),
        username=username,
        password=password,
        tls=scheme.lower() == "rediss+sentinel",
    )


def _host_port(entry: str) -> tuple[str, int]:
    entry = entry.strip()
    if entry.startswith("["):  # an IPv6 address: [::1]:26379
        host, _, after = entry[1:].partition("]")
        port_text = after.removeprefix(":")
    else:
        host, _, port_text = entry.rpartition(":") if ":" in entry else (entry, "", "")
    if not host:
        raise ValueError(f"a Sentinel without a host in {entry!r}; use {FORM}")
    if not port_text:
        return host, SENTINEL_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"bad Sentinel port in {entry!r}; use {FORM}")
    return host, int(port_text)
