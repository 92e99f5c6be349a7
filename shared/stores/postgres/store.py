"""PostgreSQL: the task log's shared SQL (`shared.stores.sql.tasks`) on a
pool of connections, each write one transaction sent in psycopg's pipeline
mode in two round trips (the listing moment and the task's row read,
locked; then the rest, the notification and the commit at once).

Tables (schema `toolnexus`, created by `toolnexus-serve db upgrade`, see
`migrations/`): the task log's (`tasks`, `events`, `history`, `contexts`,
`times`), the counts a listing totals (kept by triggers, in stripes a
process each, folded by the reaper's purge), and the small documents and
scored indexes every feature is written over (`documents`, `indexes`).
The clock is the caller's (as on Redis): what the time indexes hold is
comparable with the cutoffs the reaper passes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, suppress
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus

from shared.errors import ConfigError, StoreError
from shared.ops.store_metrics import count_failover
from shared.owners.book import DocumentBook
from shared.push.contract import Once
from shared.store.contract import LOG_LIMIT, Created, Record
from shared.store.spec import POSTGRES_TIMEOUT
from shared.store.time_indexes import TimeIndexes
from shared.store.wakeups import Waiter
from shared.stores.postgres.listener import PostgresListener
from shared.stores.postgres.pool import ForkSafePool
from shared.stores.postgres.schema import DEFAULT_SCHEMA, behind, checked_schema
from shared.stores.postgres.session import STUCK_SESSIONS, session_settings, with_keepalives
from shared.stores.postgres.statements import KeyTaken, PostgresRunner, Statements
from shared.stores.sql.dialects import POSTGRESQL
from shared.stores.sql.documents import SqlDocuments
from shared.stores.sql.indexes import SqlIndexes
from shared.stores.sql.runner import Transaction
from shared.stores.sql.store import SqlStore
from shared.stores.sql.tasks import TaskLog
from shared.task import Task

log = logging.getLogger(__name__)

R = TypeVar("R")
Clock = Callable[[], float]
# Connections per process. A request holds one only for its statement (a
# waiting stream holds none), and PostgreSQL's default max_connections is
# 100 for every process of the fleet together.
POOL_SIZE = 10
# Seconds any statement may take, on the server and as the client waits for
# it (TOOLNEXUS_PG_TIMEOUT; `shared.stores.postgres.session`).
STORE_TIMEOUT = POSTGRES_TIMEOUT
# Seconds a caller waits for a pooled connection, and a new one to connect.
POOL_WAIT = 2.0
# How a read of several statements begins (`_snapshot`).
SNAPSHOT = (
    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY",
    "SET LOCAL enable_seqscan = off",
)
# Tries of a create whose message key or id a concurrent create took first
# (the next try finds that task).
_CREATE_ATTEMPTS = 5


class PostgresStore(SqlStore):
    def __init__(
        self,
        url: str,
        *,
        terminal_ttl: float | None = None,
        clock: Clock = time.time,
        log_limit: int = LOG_LIMIT,
        connections: int = POOL_SIZE,
        timeout: float = STORE_TIMEOUT,
        notify: bool = True,
        schema: str = DEFAULT_SCHEMA,
    ) -> None:
        """`timeout`: the store's timeout, which bounds every statement and
        every wait for the server (`shared.stores.postgres.session`)."""
        self.conninfo = with_keepalives(_conninfo(url), timeout)
        self.schema = checked_schema(schema)
        self._where = _where(self.conninfo)
        self._clock = clock
        self._session = session_settings(self.schema, timeout)
        self._timeout = timeout
        channel = f"{self.schema}_events"
        self._channel = channel if notify else ""
        self._pool = ForkSafePool(
            self.conninfo,
            size=connections,
            timeout=POOL_WAIT,
            answer_within=timeout,
            configure=self._configure,
        )
        self.statements = Statements(self._pool, self.schema, self._where)
        runner = PostgresRunner(self.statements)
        self.documents = SqlDocuments(runner)
        self.indexes = SqlIndexes(runner)
        self._times = TimeIndexes(self.indexes, clock)
        ttl = float(terminal_ttl) if terminal_ttl else 0.0
        self._log = TaskLog(ttl, log_limit, self._times.scores)
        self._listener = PostgresListener(
            self.conninfo, channel, self._newest, notify=notify, timeout=timeout
        )
        self._push = Once()
        self._turns = DocumentBook(self.documents)
        self._primary: str | None = None  # the server new connections last landed on
        self._primary_lock = threading.Lock()

    def create(
        self, task: Task, message_key: str | None = None, supersedes: str | None = None
    ) -> Created:
        for _ in range(_CREATE_ATTEMPTS):
            try:
                return super().create(task, message_key, supersedes)
            except KeyTaken:
                continue  # a concurrent create took the key first: this one now finds it
        raise StoreError(
            f"task store unavailable: PostgreSQL at {self._where}: the message key of"
            f" task {task.get('id')} stayed contended",
            "PostgreSQL refused the statement",
        )

    def watch(self, task_id: str) -> AbstractContextManager[Waiter]:
        return self._listener.watch(task_id)

    def purge_expired(self) -> int:
        """As every SQL store's, then the kept counts folded (migration 0013);
        first, the store's sessions stuck mid-exchange are ended
        (`STUCK_SESSIONS`): the reaper's upkeep is what every fleet runs."""
        self._end_stuck_sessions()
        purged = super().purge_expired()
        self.statements.one("SELECT counts_fold()", ())
        return purged

    def _end_stuck_sessions(self) -> None:
        try:
            ended = self.statements.one(STUCK_SESSIONS, (self._timeout,))
        except StoreError as error:  # a role that may not end them: the rest goes on
            log.warning("PostgreSQL at %s: could not end stuck sessions: %s", self._where, error)
            return
        if ended and ended[0]:
            log.warning(
                "PostgreSQL at %s: ended %d session(s) of this store waiting for a lost client"
                " mid-exchange, with their locks",
                self._where,
                ended[0],
            )

    def memory_use(self) -> tuple[int, int] | None:
        return None  # PostgreSQL keeps tasks on disk: no memory limit to warn of

    def ping(self) -> str:
        """A read and a small write (a standby answers reads but refuses every
        task it would be sent), and the schema's version; the server that
        answered (of several hosts, the one that takes writes now)."""
        with self.statements.connection() as conn:
            if reason := behind(conn, self.schema):
                raise StoreError(
                    f"task store unusable: PostgreSQL at {self._where}: {reason}", reason
                )
            conn.execute(
                "INSERT INTO times VALUES ('ready', %s::float8)"
                " ON CONFLICT (name) DO UPDATE SET at = excluded.at",
                (self._clock(),),
            )
            return _node(conn)

    def close(self) -> None:
        self._pool.close()

    # --- the database ------------------------------------------------------------

    def _writing(self, work: Callable[[Transaction], R]) -> R:
        """`work` between a `BEGIN` and a `COMMIT` sent in pipeline mode, so
        the transaction costs no round trip of its own: the first answer read
        (the write's locked reads) comes back with the `BEGIN`, and the
        `COMMIT` goes with the rest: two round trips a write."""
        with self.statements.connection() as conn:
            try:
                with conn.pipeline() as pipeline, conn.cursor() as cursor:
                    cursor.execute("BEGIN")
                    done = work(Transaction(cursor, POSTGRESQL, pipeline.sync, conn.cursor))
                    cursor.execute("COMMIT")
            except BaseException:
                if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                    with suppress(psycopg.Error):
                        conn.execute("ROLLBACK")
                raise
            return done

    def _reading(self, work: Callable[[Transaction], R]) -> R:
        """Each statement as of its own moment (one statement: one moment)."""
        with self.statements.connection() as conn, conn.cursor() as cursor:
            return work(Transaction(cursor, POSTGRESQL))

    def _snapshot(self, work: Callable[[Transaction], R]) -> R:
        """One snapshot, with sequential scans off: a listing's counts are
        answered by the listing indexes alone (they hold every column a count
        reads), but where one owner holds most tasks PostgreSQL's default
        costs rate a read of the whole table as the cheaper way, and that read
        is several times slower (it reads every task's document)."""
        with self.statements.connection() as conn, conn.transaction(), conn.cursor() as cursor:
            for setting in SNAPSHOT:
                cursor.execute(setting)
            return work(Transaction(cursor, POSTGRESQL))

    def _wrote(self, t: Transaction, record: Record) -> None:
        if self._channel:
            payload = f"{record.task['id']} {record.seq}"
            t.send(
                "SELECT pg_notify(:channel, :payload)",
                {"channel": self._channel, "payload": payload},
            )

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        """Every pooled connection: this store's schema, and the server told
        when to give up on a statement, a lock and a vanished client
        (`shared.stores.postgres.session`), in one round trip; a connection
        that lands on another server than the last (of several hosts, a
        promoted standby) counts a failover."""
        conn.execute(*self._session)
        node = _node(conn)
        with self._primary_lock:
            before, self._primary = self._primary, node
        if before is not None and before != node:
            count_failover("postgresql")
            log.warning("PostgreSQL: writes now go to %s (they went to %s)", node, before)

    def _newest(self, task_ids: list[str]) -> list[int | None]:
        rows = self.statements.rows(
            "SELECT id, seq FROM tasks WHERE id = ANY(%s::text[])", (task_ids,)
        )
        found = {task_id: int(seq) for task_id, seq in rows}
        return [found.get(task_id) for task_id in task_ids]


def split_url(url: str) -> tuple[str, str | None]:
    """The libpq URL and the `schema` query parameter (ours, which libpq would refuse)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for key, value in query if key == "schema"]
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    return urlunsplit(parts._replace(query=rest)), (schemas[-1] if schemas else None)


def _conninfo(url: str) -> str:
    """The libpq connection string of `url` (postgres:// is PostgreSQL's own alias)."""
    try:
        return make_conninfo(url)
    except psycopg.ProgrammingError as error:
        raise ConfigError(f"TOOLNEXUS_STORE: not a PostgreSQL URL: {error}") from None


def _node(conn: psycopg.Connection[Any]) -> str:
    """host:port of the server a connection is on."""
    return f"{conn.info.host}:{conn.info.port}"


def _where(conninfo: str) -> str:
    """host:port/database (each host:port of a primary and its standbys), never the password."""
    parts = conninfo_to_dict(conninfo)
    hosts = str(parts.get("host") or "localhost").split(",")
    ports = str(parts.get("port") or "5432").split(",")
    ports += ports[-1:] * (len(hosts) - len(ports))  # libpq: one port serves every host
    nodes = ",".join(f"{host}:{port}" for host, port in zip(hosts, ports, strict=False))
    return f"{nodes}/{parts.get('dbname') or parts.get('user') or ''}"


def postgres_store(
    url: str,
    *,
    terminal_ttl: float | None = None,
    connections: int | None = None,
    clock: Clock = time.time,
    log_limit: int = LOG_LIMIT,
    timeout: float = STORE_TIMEOUT,
    notify: bool = True,
    schema: str | None = None,
) -> PostgresStore:
    """A store on the PostgreSQL at `url`; nothing is sent until first use.
    The database must have been migrated (`toolnexus-serve db upgrade`).
    The schema is `schema`, else the URL's `?schema=` parameter, else
    `toolnexus`."""
    libpq_url, named = split_url(url)
    return PostgresStore(
        libpq_url,
        terminal_ttl=terminal_ttl,
        clock=clock,
        log_limit=log_limit,
        connections=connections or POOL_SIZE,
        timeout=timeout,
        notify=notify,
        schema=schema or named or DEFAULT_SCHEMA,
    )
