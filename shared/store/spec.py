"""What a TOOLNEXUS_STORE spec may look like, checked without importing any store.

Settings are read by every process, including ones (and tools) that never
open a store, so checking a spec must not import redis, psycopg or the file
store: this module imports nothing but the error types and the reference
syntax. `shared.store.resolve` turns an accepted spec into a store.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit

from shared.loading import is_reference
from shared.redis_nodes.url import SENTINEL_SCHEMES, is_sentinel, parse_sentinel

REDIS_SCHEMES: Final = ("redis://", "rediss://", "unix://", *SENTINEL_SCHEMES)
POSTGRES_SCHEMES: Final = ("postgresql://", "postgres://")
# sqlite:///relative/tasks.db or sqlite:////absolute/tasks.db, as SQLAlchemy writes them.
SQLITE_SCHEME: Final = "sqlite:///"

# The file and SQLite stores' fsync policies (`shared.stores.file.store` applies them).
ALWAYS: Final = "always"
EVERYSEC: Final = "everysec"
NO: Final = "no"
FSYNC_POLICIES: Final = (ALWAYS, EVERYSEC, NO)

# Connections per process of a store over the network (Redis, PostgreSQL):
# enough for the commands in flight at once (a waiting request holds none),
# not one per open request. A worker running many I/O calls asks for more.
POOL_SIZE: Final = 64
# Seconds a PostgreSQL statement may take (TOOLNEXUS_PG_TIMEOUT's default).
POSTGRES_TIMEOUT: Final = 10.0

ACCEPTED_FORMS: Final = (
    "'memory' (or unset), 'file:<dir>', 'sqlite:///<relative path>' or"
    " 'sqlite:////<absolute path>', a redis://, rediss:// or unix:// URL,"
    " a redis+sentinel://host:26379,host2:26379/<master name>/<db> URL,"
    " a postgresql:// or postgres:// URL (several host:port, comma-separated, for a"
    " primary and its standbys),"
    " or 'package.module:attr' naming a store or a factory"
)


def check_url_port(url: str) -> None:
    """ValueError when a URL's port is not a number from 0 to 65535, read now
    rather than when a client first connects (where no setting is named); of
    a Sentinel URL, every part; of a PostgreSQL URL, every host's."""
    if is_sentinel(url):
        parse_sentinel(url)
        return
    # libpq takes several hosts (host1:5432,host2:5432): each port is checked.
    hosts = urlsplit(url).netloc.rpartition("@")[2]
    for host in hosts.split(",") if url.startswith(POSTGRES_SCHEMES) else [hosts]:
        try:
            _ = urlsplit(f"//{host}").port
        except ValueError as error:
            raise ValueError(f"bad port in the URL: {error}") from None


def check_store_spec(spec: str | None) -> None:
    """Validate the form of a spec without connecting or creating anything."""
    if spec is None or spec == "memory":
        return
    if spec.startswith(REDIS_SCHEMES + POSTGRES_SCHEMES):
        check_url_port(spec)
        return
    if spec.startswith("file:") and spec != "file:":
        return
    if spec.startswith(SQLITE_SCHEME):
        sqlite_path(spec)
        return
    if is_reference(spec):
        return
    raise ValueError(f"unknown store spec {spec!r}; accepted: {ACCEPTED_FORMS}")


def sqlite_path(spec: str) -> str:
    """The database file a sqlite:/// spec names; ValueError for one that
    names none, or one only this process could see."""
    path = spec.removeprefix(SQLITE_SCHEME)
    if not path or path.endswith("/") or "?" in path or path.startswith(":memory:"):
        raise ValueError(
            f"{spec!r} names no database file: write sqlite:///relative/tasks.db or"
            " sqlite:////absolute/tasks.db (for tasks kept in this process alone, 'memory')"
        )
    return path
