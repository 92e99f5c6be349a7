"""What every process says when it starts, and the start-up checks they share.

The start-up line names what an operator checks first (store, broker, queue,
function, the timings that matter) and never a secret: passwords in URLs
are masked, tokens are counted, not shown.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from shared.errors import ConfigError
from shared.settings import Settings

MASK: Final = "***"
_SECRET_QUERY_KEYS: Final = frozenset({"password", "pass", "pwd", "token", "secret"})

MEMORY_STORE_REFUSED: Final = (
    "TOOLNEXUS_STORE=memory is private to each process, so {program} would lose"
    " tasks between processes: set TOOLNEXUS_STORE to a redis:// URL or file:<dir>"
    " shared by the front end, the workers and beat"
)


def masked(url: str) -> str:
    """`url` with any password (user info or query) replaced by ***; other text as is."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not parts.scheme or (not parts.netloc and not parts.query):
        return url
    netloc = parts.netloc
    if password is not None:
        user_info, _, host = netloc.rpartition("@")
        user = user_info.partition(":")[0]
        netloc = f"{user}:{MASK}@{host}"
    query = parts.query
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(key.lower() in _SECRET_QUERY_KEYS for key, _ in pairs):
        query = urlencode(
            [(key, MASK if key.lower() in _SECRET_QUERY_KEYS else value) for key, value in pairs],
            safe="*",
        )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def refuse_private_store(settings: Settings, program: str) -> None:
    """Several processes need one store; the per-process memory store is refused."""
    if settings.store.strip().lower() == "memory":
        raise ConfigError(MEMORY_STORE_REFUSED.format(program=program))


def startup_line(
    role: str,
    settings: Settings,
    extra: Mapping[str, object] | None = None,
    *,
    omit: Collection[str] = (),
) -> str:
    """`<role>: store …, broker …, queue …, run …, …` with `extra` (role-specific)
    last, leaving out the `omit` items a role does not use (the embedded
    server has no broker, no queue and no time limit)."""
    items: dict[str, object] = {
        "store": masked(settings.store),
        "broker": masked(settings.broker_url),
        "queue": settings.queue,
        "run": settings.run or "none",
        "on_task": settings.on_task or "none",
        "task_ttl": f"{settings.task_ttl:g} s" if settings.task_ttl else "none",
        "heartbeat": f"{settings.heartbeat:g} s",
        "stale_after": f"{settings.stale_after:g} s",
        "reap_every": f"{settings.reap_every:g} s",
        "time_limit": f"{settings.time_limit:g} s",
        "api_tokens": len(settings.api_tokens),
        "log": f"{settings.log_level} {settings.log_format}",
        **(extra or {}),
    }
    shown = (f"{key} {value}" for key, value in items.items() if key not in omit)
    return f"{role} starting: " + ", ".join(shown)
