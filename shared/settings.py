"""All configuration, read from `TOOLNEXUS_*` environment variables once.

Build a `Settings` at the edge (app factory, Celery entry point, embedded
launcher, tests) and pass it in; nothing deeper reads the environment.
A bad value raises ConfigError with one line naming the variable.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from shared.attempts import Attempts
from shared.contexts import PARALLEL, POLICIES
from shared.errors import ConfigError
from shared.loading import is_reference
from shared.store.spec import FSYNC_POLICIES, check_store_spec, check_url_port

LOG_FORMATS = ("text", "json")
# RabbitMQ's queue types (shared.broker.amqp declares them; named here so
# settings import no broker code)
AMQP_QUEUE_TYPES = ("quorum", "classic")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _text(value: str) -> str:
    return value


def _optional_text(value: str) -> str | None:
    return value or None


def _seconds(value: str) -> float:
    number = float(value)
    if not number > 0 or number == float("inf"):
        raise ValueError("must be a positive number of seconds")
    return number


def _seconds_or_never(value: str) -> float | None:
    """Seconds, where `0` (or empty) means never."""
    return None if not value or float(value) == 0 else _seconds(value)


def _share(value: str) -> float:
    number = float(value)
    if not 0 < number <= 1:
        raise ValueError("must be a share above 0 and at most 1, e.g. 0.9")
    return number


def _count(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError("must be a whole number of at least 1")
    return number


def _count_or_zero(value: str) -> int:
    """A whole number of at least 0 (0 turns the thing off)."""
    number = int(value)
    if number < 0:
        raise ValueError("must be a whole number of at least 0")
    return number


def _optional_count(value: str) -> int | None:
    return _count(value) if value else None


def _port(value: str) -> int:
    number = int(value)
    if not 1 <= number <= 65535:
        raise ValueError("must be a port number from 1 to 65535")
    return number


def _optional_port(value: str) -> int | None:
    return _port(value) if value else None


def _log_level(value: str) -> str:
    if value.upper() not in LOG_LEVELS:
        raise ValueError(f"use one of {', '.join(LOG_LEVELS)}")
    return value.upper()


def _log_format(value: str) -> str:
    if value not in LOG_FORMATS:
        raise ValueError(f"use {' or '.join(LOG_FORMATS)}")
    return value


def _names(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


# The card's names of the bindings this service serves (`protocolBinding`).
CARD_BINDINGS: Final = ("JSONRPC", "HTTP+JSON", "GRPC")


def _card_bindings(value: str) -> tuple[str, ...]:
    """Which bindings the public card lists: JSON-RPC always (0.3 readers
    take the card's top-level url, which is its endpoint)."""
    names = tuple(name.upper() for name in _names(value))
    unknown = [name for name in names if name not in CARD_BINDINGS]
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: use names of {', '.join(CARD_BINDINGS)}")
    if "JSONRPC" not in names:
        raise ValueError("must list JSONRPC: 0.3 clients read the card's url, its endpoint")
    return names


def _tokens(value: str) -> tuple[str, ...]:
    """Comma-separated `name:token` or bare tokens; a value that names none
    (",", " , ") is a mistake, not a wish to run open: empty means open."""
    entries = _names(value)
    if value and not entries:
        raise ValueError("names no token: use tok1,tok2 or name:token entries, or leave it empty")
    for entry in entries:
        name, colon, secret = entry.partition(":")
        if colon and not secret.strip():
            raise ValueError(f"the entry for {name.strip()!r} has no token after ':'")
    return entries


def _host_names(value: str) -> tuple[str, ...]:
    names = tuple(name.lower() for name in _names(value))
    for name in names:
        if name != "*" and ("/" in name or "@" in name or " " in name):
            raise ValueError(f"{name!r} is not a host name like agent.example.com or localhost")
    return names


def _origins(value: str) -> tuple[str, ...]:
    origins = tuple(origin.lower().rstrip("/") for origin in _names(value))
    for origin in origins:
        scheme, sep, rest = origin.partition("://")
        if origin != "*" and not (sep and scheme in ("http", "https") and rest and "/" not in rest):
            raise ValueError(f"{origin!r} is not an origin like https://app.example.com")
    return origins


def _optional_http_url(value: str) -> str | None:
    if value and not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return value or None


def _optional_file_text(value: str) -> str | None:
    """Inline text, or `@path` to a file holding it (e.g. a PEM key)."""
    if value.startswith("@"):
        try:
            return Path(value[1:]).read_text()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or "not text"
            raise ValueError(f"cannot read {value[1:]!r}: {reason}") from None
    return value or None


# Only algorithms with a public key: an HMAC secret would have to be shared
# with every issuer, and "none" verifies nothing.
_JWT_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


def _jwt_algorithms(value: str) -> tuple[str, ...]:
    algorithms = _names(value)
    for algorithm in algorithms:
        if algorithm not in _JWT_ALGORITHMS:
            raise ValueError(f"{algorithm!r} is not one of {', '.join(sorted(_JWT_ALGORITHMS))}")
    if not algorithms:
        raise ValueError("name at least one algorithm, e.g. RS256")
    return algorithms


def _media_types(value: str) -> tuple[str, ...]:
    types = _names(value)
    for media_type in types:
        kind, slash, subtype = media_type.partition("/")
        if not (slash and kind and subtype):
            raise ValueError(f"{media_type!r} is not a media type like text/plain or image/*")
    if not types:
        raise ValueError("name at least one media type, e.g. text/plain or */*")
    return types


def _card_compat(value: str) -> str | None:
    if value not in ("", "0.3", "1.0"):
        raise ValueError("use 1.0 (the 1.0 card alone) or 0.3 (the default: with the 0.3 fields)")
    return value or None


def _fsync_policy(value: str) -> str:
    if value not in FSYNC_POLICIES:
        raise ValueError(f"use {', '.join(FSYNC_POLICIES)}")
    return value


# How a worker process runs agent calls (worker.runtime.pools): prefork, one call per
# process; threads and asyncio, TOOLNEXUS_CONCURRENCY calls in one process.
POOLS = ("prefork", "threads", "asyncio")
# Settings that were renamed: the old name is refused (naming the new one),
# not silently ignored.
RENAMED = {"TOOLNEXUS_GRPC_THREADS": "TOOLNEXUS_GRPC_CALLS"}


def _pool(value: str) -> str:
    if value == "gevent":
        raise ValueError(
            "gevent is not supported (a warm shutdown on it starts queued work; see"
            " docs/io-workers.md): use threads (blocking agents) or asyncio (async agents),"
            " which run many waiting calls per process"
        )
    if value not in POOLS:
        raise ValueError(f"use one of {', '.join(POOLS)}")
    return value


def _same_context(value: str) -> str:
    if value not in POLICIES:
        raise ValueError(f"use one of {', '.join(POLICIES)}")
    return value


def _flag(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("use true or false")


def _amqp_queue_type(value: str) -> str:
    if value not in AMQP_QUEUE_TYPES:
        raise ValueError(f"use {' or '.join(AMQP_QUEUE_TYPES)}")
    return value


def _store(value: str) -> str:
    check_store_spec(value)
    return value


def _url(value: str) -> str:
    check_url_port(value)
    return value


def _reference(value: str) -> str:
    if not is_reference(value):
        raise ValueError("expected 'package.module:function'")
    return value


def _optional_reference(value: str) -> str | None:
    return _reference(value) if value else None


def _json_object(value: str) -> dict[str, Any] | None:
    """Inline JSON, or `@path` to a JSON file; either must be an object."""
    if not value:
        return None
    if value.startswith("@"):
        try:
            value = Path(value[1:]).read_text()
        except OSError as error:
            raise ValueError(f"cannot read {value[1:]!r}: {error.strerror}") from None
    loaded = json.loads(value)
    if not isinstance(loaded, dict):
        raise ValueError("must be a JSON object")
    return loaded


# What a per-owner override may set (TOOLNEXUS_OWNER_LIMITS), and whether
# its value is a whole number; `weight` and `rate` may be fractions.
OWNER_LIMIT_KEYS: Final = {
    "rate": False,
    "burst": True,
    "max_active": True,
    "max_running": True,
    "weight": False,
}


def _rate(value: str) -> float | None:
    """Sends per second; empty or 0: no limit."""
    if not value or float(value) == 0:
        return None
    number = float(value)
    if not 0 < number < float("inf"):
        raise ValueError("must be a positive number of sends per second, or 0 for no limit")
    return number


def _cap(value: str) -> int | None:
    """A whole number of at least 1; empty or 0: no cap."""
    number = int(value) if value else 0
    if number < 0:
        raise ValueError("must be a whole number of at least 1, or 0 for no cap")
    return number or None


# Per-owner overrides as ((owner, ((limit, value), ...)), ...): immutable, as
# every setting is; shared/owners/limits.py reads them into a table.
OwnerOverrides = tuple[tuple[str, tuple[tuple[str, float], ...]], ...]


def _owner_limits(value: str) -> OwnerOverrides:
    """A JSON or YAML file (its path) mapping each owner to the limits that
    differ from the defaults: {"alice": {"rate": 20, "max_running": 4}}."""
    if not value:
        return ()
    import yaml  # a dependency already; only needed when the file is named

    try:
        loaded = yaml.safe_load(Path(value).read_text())
    except OSError as error:
        raise ValueError(f"cannot read {value!r}: {error.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise ValueError(f"{value!r} is not JSON or YAML: {error}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"{value!r} must map owners to their limits")
    table: list[tuple[str, tuple[tuple[str, float], ...]]] = []
    for owner, limits in loaded.items():
        if not isinstance(limits, dict):
            raise ValueError(f"the entry for {owner!r} must map limits to numbers")
        entry: dict[str, float] = {}
        for key, number in limits.items():
            if key not in OWNER_LIMIT_KEYS:
                raise ValueError(
                    f"{owner!r}: unknown limit {key!r} (use {', '.join(OWNER_LIMIT_KEYS)})"
                )
            whole = OWNER_LIMIT_KEYS[key]
            valid = (
                isinstance(number, int | float)
                and not isinstance(number, bool)
                and number >= 0
                and number != float("inf")
                and (not whole or float(number).is_integer())
                and (key != "weight" or number > 0)
            )
            if not valid:
                kind = "a whole number" if whole else "a number"
                least = "above 0" if key == "weight" else "of at least 0 (0: no limit)"
                raise ValueError(f"{owner!r}: {key} must be {kind} {least}")
            entry[key] = float(number)
        table.append((str(owner), tuple(entry.items())))
    return tuple(table)


# The card's name when neither TOOLNEXUS_NAME nor the agent gives one.
DEFAULT_NAME: Final = "toolnexus-agent"


def _env(name: str, parse: Callable[[str], Any], default: Any) -> Any:
    return field(default=default, metadata={"env": f"TOOLNEXUS_{name}", "parse": parse})


@dataclass(frozen=True)
class Settings:
    # where tasks live and how work travels
    store: str = _env("STORE", _store, "memory")
    broker_url: str = _env("BROKER_URL", _url, "redis://localhost:6379/0")
    queue: str = _env("QUEUE", _text, "toolnexus")
    # on an amqp:// broker (RabbitMQ): quorum (replicated, the default) or
    # classic queues; an existing queue keeps the type it was made with
    amqp_queue_type: str = _env("AMQP_QUEUE_TYPE", _amqp_queue_type, "quorum")
    # --- the event log and what it keeps ---
    # seconds a finished task is kept (then forgotten, with its log), on every
    # store; 0 keeps it forever
    task_ttl: float | None = _env("TASK_TTL", _seconds_or_never, 7 * 24 * 3600.0)
    # seconds a task may wait for the peer (input-required, auth-required)
    # before the reaper fails it, saying why; 0 waits forever
    input_timeout: float | None = _env("INPUT_TIMEOUT", _seconds_or_never, 24 * 3600.0)
    # Sentinel's own password, when TOOLNEXUS_STORE or TOOLNEXUS_BROKER_URL is a
    # redis+sentinel:// URL (the master's password is in the URL)
    sentinel_password: str | None = _env("SENTINEL_PASSWORD", _optional_text, None)
    # Redis: replicas that must confirm every write the service acknowledges
    # (WAIT), and how long it waits for them; 0 acknowledges on the master's word
    redis_min_replicas: int = _env("REDIS_MIN_REPLICAS", _count_or_zero, 0)
    redis_replica_timeout: float = _env("REDIS_REPLICA_TIMEOUT", _seconds, 1.0)
    # /readyz warns (and toolnexus_store_memory_ratio shows) when Redis uses
    # more than this share of its maxmemory
    redis_memory_warn: float = _env("REDIS_MEMORY_WARN", _share, 0.9)
    # --- end of the event log's settings ---
    # the file store: when its event logs are forced to the disk (like Redis's
    # appendfsync): always (every append; a power cut loses nothing
    # acknowledged), everysec (once a second) or no (when the OS will)
    file_fsync: str = _env("FILE_FSYNC", _fsync_policy, "always")
    # the PostgreSQL store: connections per process (a request or an I/O call
    # takes one only for its statement; the server's max_connections, 100 by
    # default, is shared by every process of the fleet), and whether writes
    # NOTIFY the front ends (false: they poll the watched tasks instead)
    pg_pool: int = _env("PG_POOL", _count, 10)
    pg_notify: bool = _env("PG_NOTIFY", _flag, True)
    # the PostgreSQL store's timeout: a statement runs at most this long on the
    # server, the client waits at most a second more for any answer, and the
    # server ends a session left in a transaction, or a client gone silent,
    # within about as long (docs/postgresql.md#when-a-client-vanishes)
    pg_timeout: float = _env("PG_TIMEOUT", _seconds, 10.0)
    # --- push notifications ---
    # false: the push-notification methods answer -32003 and the card says so
    push: bool = _env("PUSH", _flag, True)
    # webhook configs one task may hold
    # the Celery queue deliveries travel on (a worker consumes it, the fulfil
    # queue, or both)
    push_queue: str = _env("PUSH_QUEUE", _text, "push")
    push_max_configs: int = _env("PUSH_MAX_CONFIGS", _count, 10)
    # seconds an event is retried (exponential backoff with jitter) before it
    # is given up
    push_retry_for: float = _env("PUSH_RETRY_FOR", _seconds, 3600.0)
    # the first retry's delay, and the longest delay between two attempts
    push_backoff: float = _env("PUSH_BACKOFF", _seconds, 1.0)
    push_backoff_max: float = _env("PUSH_BACKOFF_MAX", _seconds, 300.0)
    push_connect_timeout: float = _env("PUSH_CONNECT_TIMEOUT", _seconds, 10.0)
    push_read_timeout: float = _env("PUSH_READ_TIMEOUT", _seconds, 10.0)
    # hosts or CIDRs a webhook may reach although loopback, private,
    # link-local or reserved (e.g. 127.0.0.1 for local development)
    push_allowed_hosts: tuple[str, ...] = _env("PUSH_ALLOWED_HOSTS", _names, ())
    # seconds between beat's sweeps for due deliveries and dead leases
    push_sweep: float = _env("PUSH_SWEEP", _seconds, 1.0)
    # seconds a delivery worker holds a (task, webhook) without renewing it;
    # after that (a dead worker) the sweep hands it to another
    push_lease: float = _env("PUSH_LEASE", _seconds, 30.0)
    # seconds a delivery keeps following a quiet running task before it lets go
    push_linger: float = _env("PUSH_LINGER", _seconds, 10.0)
    # a PEM private key (RSA or EC P-256), inline or @path: each delivery then
    # carries a JWT signed with it, and /.well-known/jwks.json publishes its public key
    push_signing_key: str | None = _env("PUSH_SIGNING_KEY", _optional_file_text, None)
    # --- end of the push settings ---
    # the agent
    # Set but empty: no function; workers then fail each task saying so.
    run: str | None = _env("RUN", _optional_reference, "examples.agents:echo")
    on_task: str | None = _env("ON_TASK", _optional_reference, None)
    skills: str | None = _env("SKILLS", _optional_text, None)
    skill_names: tuple[str, ...] = _env("SKILL_NAMES", _names, ())
    # liveness: a working task whose heartbeat is older than stale_after is
    # failed by the reaper, which runs every reap_every seconds
    stale_after: float = _env("STALE_AFTER", _seconds, 60.0)
    heartbeat: float = _env("HEARTBEAT", _seconds, 10.0)
    reap_every: float = _env("REAP_EVERY", _seconds, 15.0)
    # beat's re-sends of tasks still `submitted`: at most resend_batch a run,
    # each task's intervals doubling up to resend_backoff_max
    resend_batch: int = _env("RESEND_BATCH", _count, 200)
    resend_backoff_max: float = _env("RESEND_BACKOFF_MAX", _seconds, 600.0)
    # runs a turn gets when one ends without an outcome (a worker lost, the
    # agent's Retry; 1: the task fails), and the backoff between them
    max_attempts: int = _env("MAX_ATTEMPTS", _count, 1)
    retry_backoff: float = _env("RETRY_BACKOFF", _seconds, 1.0)
    retry_backoff_max: float = _env("RETRY_BACKOFF_MAX", _seconds, 60.0)
    # seconds a stopping worker lets its running tasks finish before it
    # hands back those with attempts left
    drain_timeout: float = _env("DRAIN_TIMEOUT", _seconds, 30.0)
    # what a new task does while an earlier one of its context is still
    # submitted or working (shared.contexts); a message may choose its own
    same_context: str = _env("SAME_CONTEXT", _same_context, PARALLEL)
    time_limit: float = _env("TIME_LIMIT", _seconds, 300.0)
    concurrency: int | None = _env("CONCURRENCY", _optional_count, None)
    # the agent card
    name: str = _env("NAME", _text, DEFAULT_NAME)
    description: str = _env("DESCRIPTION", _text, "")
    version: str = _env("VERSION", _text, "0.1.0")
    url: str | None = _env("URL", _optional_text, None)
    provider_organization: str | None = _env("PROVIDER_ORGANIZATION", _optional_text, None)
    provider_url: str | None = _env("PROVIDER_URL", _optional_text, None)
    card: Mapping[str, Any] | None = _env("CARD", _json_object, None)
    # media types the agent reads and writes (the card's default modes); a
    # message with a part of another type is refused (-32005)
    input_modes: tuple[str, ...] = _env(
        "INPUT_MODES", _media_types, ("text/plain", "application/json")
    )
    output_modes: tuple[str, ...] = _env(
        "OUTPUT_MODES", _media_types, ("text/plain", "application/json")
    )
    # what a card request without a version gets: "0.3" (the default) the 1.0
    # card with the 0.3 fields, readable by every client; "1.0" the 1.0 card alone
    card_compat: str | None = _env("CARD_COMPAT", _card_compat, None)
    # the HTTP edge
    api_tokens: tuple[str, ...] = _env("API_TOKENS", _tokens, ())
    # bearer JWTs, verified with the keys at a JWKS URL or one public key
    jwt_jwks_url: str | None = _env("JWT_JWKS_URL", _optional_http_url, None)
    jwt_key: str | None = _env("JWT_KEY", _optional_file_text, None)
    jwt_issuer: str | None = _env("JWT_ISSUER", _optional_text, None)
    jwt_audience: str | None = _env("JWT_AUDIENCE", _optional_text, None)
    jwt_algorithms: tuple[str, ...] = _env("JWT_ALGORITHMS", _jwt_algorithms, ("RS256", "ES256"))
    jwt_principal_claim: str = _env("JWT_PRINCIPAL_CLAIM", _text, "sub")
    # browsers: Host names served (besides loopback) and origins allowed (CORS)
    allowed_hosts: tuple[str, ...] = _env("ALLOWED_HOSTS", _host_names, ())
    allowed_origins: tuple[str, ...] = _env("ALLOWED_ORIGINS", _origins, ())
    max_body: int = _env("MAX_BODY", _count, 1024 * 1024)
    blocking_timeout: float = _env("BLOCKING_TIMEOUT", _seconds, 30.0)
    # longest a long-poll GetTask (currentGeneration, A2A 1.1) waits, seconds
    long_poll_timeout: float = _env("LONG_POLL_TIMEOUT", _seconds, 30.0)
    # MiB of finished tasks (as JSON) each front-end process answers GetTask
    # for from its own memory; 0 asks the store every time
    finished_cache_mb: int = _env("FINISHED_CACHE_MB", _count_or_zero, 32)
    # per-owner limits (shared/owners/limits.py; docs/fair-share.md), each
    # off by default: sends a second with a burst, shared by every front end
    # through the store; tasks an owner has unfinished at once; tasks of an
    # owner published or running at once across the fleet (the rest wait)
    owner_rate: float | None = _env("OWNER_RATE", _rate, None)
    owner_burst: int | None = _env("OWNER_BURST", _cap, None)
    owner_max_active: int | None = _env("OWNER_MAX_ACTIVE", _cap, None)
    owner_max_running: int | None = _env("OWNER_MAX_RUNNING", _cap, None)
    # a JSON or YAML file of per-owner values over those (and each owner's
    # weight in the fair share)
    owner_limits: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = _env(
        "OWNER_LIMITS", _owner_limits, ()
    )
    # workers take the next task round-robin over owners (weighted), not in
    # arrival order
    fair_share: bool = _env("FAIR_SHARE", _flag, True)
    # a message id a caller already sent names the same message (a retry);
    # false for peers that reuse message ids for different messages
    idempotent_sends: bool = _env("IDEMPOTENT_SENDS", _flag, True)
    # seconds a connection may stay idle (no request, or a request not sent
    # whole) before the server closes it
    idle_timeout: float = _env("IDLE_TIMEOUT", _seconds, 5.0)
    # seconds between SSE keepalive comments on an idle stream
    keepalive: float = _env("KEEPALIVE", _seconds, 15.0)
    host: str = _env("HOST", _text, "127.0.0.1")
    port: int = _env("PORT", _port, 8080)
    log_level: str = _env("LOG_LEVEL", _log_level, "INFO")
    # text: one readable line per record; json: one JSON object per line
    log_format: str = _env("LOG_FORMAT", _log_format, "text")
    # Celery workers and beat serve Prometheus metrics on this port (unset: they
    # serve none); the web tier serves them at /metrics on its own port
    metrics_port: int | None = _env("METRICS_PORT", _optional_port, None)
    # the command line (toolnexus-serve and its roles)
    # where beat keeps its schedule; unset: ~/.local/state/toolnexus-serve
    state_dir: str | None = _env("STATE_DIR", _optional_text, None)
    # the task console (web/console/views.py): pages at /console that call the API
    # as any browser client would; the embedded server turns it on by default
    console: bool = _env("CONSOLE", _flag, False)
    # seconds between the samples of the console's fleet page (web/console/fleet_window.py)
    fleet_sample_every: float = _env("FLEET_SAMPLE_EVERY", _seconds, 5.0)
    # principals (token names, `jwt:<subject>`) the console's turn counts show
    # every owner's counts to; empty: each caller sees only its own
    admin_tokens: tuple[str, ...] = _env("ADMIN_TOKENS", _names, ())
    # the extended agent card (GetExtendedAgentCard, GET /extendedAgentCard):
    # fields laid over the public card for callers past the bearer check;
    # unset: none is offered
    extended_card: Mapping[str, Any] | None = _env("EXTENDED_CARD", _json_object, None)
    # a PEM private key (RSA or EC P-256), inline or @path: the agent cards
    # then carry a signature (A2A's signed cards), verified by the public key
    # at /.well-known/jwks.json
    card_signing_key: str | None = _env("CARD_SIGNING_KEY", _optional_file_text, None)
    # waiting agents: prefork runs one call per pool process; threads and
    # asyncio run TOOLNEXUS_CONCURRENCY calls at once in one worker process
    # (docs/io-workers.md), with time limits and cancels enforced by the worker
    pool: str = _env("POOL", _pool, "prefork")
    # garbage collection in serving processes (shared.ops.collector): every
    # GC_FREEZE_EVERY seconds what survived is frozen, out of the automatic
    # full collections that otherwise stop a process holding thousands of
    # streams for a second; every GC_THAW_EVERY seconds it is thawed and
    # collected once. 0: CPython's collector as it is / never thawed
    gc_freeze_every: float | None = _env("GC_FREEZE_EVERY", _seconds_or_never, 1.0)
    gc_thaw_every: float | None = _env("GC_THAW_EVERY", _seconds_or_never, 600.0)
    # the gRPC binding (`python -m web.grpc_process`): where it listens, the
    # address the card declares for it (unset: the card lists no GRPC
    # interface; set, the embedded server serves gRPC too), the calls in
    # flight (open streams too, which hold no thread), the largest message
    # it accepts, HTTP/2 keepalive pings, and how long a shutdown lets open
    # calls and streams finish
    grpc_host: str = _env("GRPC_HOST", _text, "127.0.0.1")
    grpc_port: int = _env("GRPC_PORT", _port, 50051)
    grpc_url: str | None = _env("GRPC_URL", _optional_text, None)
    # the bindings the public card lists (each served binding not named here
    # is listed in the extended card only): a client that checks every
    # interface of the card it fetched (Google ADK wants each on the card's
    # own origin) can then use a deployment whose gRPC port is elsewhere
    card_bindings: tuple[str, ...] = _env("CARD_BINDINGS", _card_bindings, CARD_BINDINGS)
    grpc_calls: int = _env("GRPC_CALLS", _count, 10_000)
    grpc_max_message: int = _env("GRPC_MAX_MESSAGE", _count, 1024 * 1024)
    grpc_keepalive: float = _env("GRPC_KEEPALIVE", _seconds, 30.0)
    grpc_grace: float = _env("GRPC_GRACE", _seconds, 10.0)
    # TLS for the gRPC port: a PEM certificate chain and its key (inline or
    # @file); both or neither (neither: plaintext HTTP/2, for TLS in front)
    grpc_tls_cert: str | None = _env("GRPC_TLS_CERT", _optional_file_text, None)
    grpc_tls_key: str | None = _env("GRPC_TLS_KEY", _optional_file_text, None)

    def __post_init__(self) -> None:
        if self.heartbeat >= self.stale_after:
            raise ConfigError(
                f"TOOLNEXUS_HEARTBEAT ({self.heartbeat:g} s) must be shorter than"
                f" TOOLNEXUS_STALE_AFTER ({self.stale_after:g} s), or live tasks get reaped"
            )
        if self.jwt_jwks_url and self.jwt_key:
            raise ConfigError("set TOOLNEXUS_JWT_JWKS_URL or TOOLNEXUS_JWT_KEY, not both")
        if (self.jwt_jwks_url or self.jwt_key) and not (self.jwt_issuer and self.jwt_audience):
            raise ConfigError(
                "JWT authentication needs TOOLNEXUS_JWT_ISSUER and TOOLNEXUS_JWT_AUDIENCE:"
                " a token is accepted only from the issuer, for this agent"
            )
        if (self.grpc_tls_cert is None) != (self.grpc_tls_key is None):
            raise ConfigError(
                "set both TOOLNEXUS_GRPC_TLS_CERT and TOOLNEXUS_GRPC_TLS_KEY, or neither"
            )
        if not self.jwt_principal_claim:
            raise ConfigError("TOOLNEXUS_JWT_PRINCIPAL_CLAIM must name a claim, e.g. sub")

    @property
    def attempts(self) -> Attempts:
        return Attempts(self.max_attempts, self.retry_backoff, self.retry_backoff_max)

    @property
    def hard_time_limit(self) -> float:
        """When Celery kills a task that ignored the soft limit."""
        return self.time_limit + 30.0

    @property
    def beat_overdue_after(self) -> float:
        """How long after the reaper's last run beat counts as down: three
        missed runs (beat's health check; /readyz uses the same three)."""
        return 3 * self.reap_every

    @property
    def beat_schedule(self) -> Path:
        """Beat's schedule file (celery's shelve), in the state directory,
        never in whatever directory beat was started from."""
        folder = Path(self.state_dir) if self.state_dir else Path.home() / ".local/state"
        if not self.state_dir:
            folder = folder / "toolnexus-serve"
        return folder.expanduser() / "celerybeat-schedule"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        source = os.environ if env is None else env
        for old, new in RENAMED.items():
            if old in source:
                raise ConfigError(f"{old} is now {new}: set that instead")
        values: dict[str, Any] = {}
        for spec in dataclasses.fields(cls):
            variable = spec.metadata["env"]
            raw = source.get(variable)
            if raw is None:
                continue
            try:
                values[spec.name] = spec.metadata["parse"](raw.strip())
            except ValueError as error:
                raise ConfigError(f"{variable}={raw!r}: {error}") from None
        return cls(**values)

    @classmethod
    def variables(cls) -> dict[str, Any]:
        """Every environment variable with its default, for docs and tests."""
        return {spec.metadata["env"]: spec.default for spec in dataclasses.fields(cls)}
