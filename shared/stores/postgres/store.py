"""PostgreSQL: each task a row, its events a table, every write one function call.

Tables (schema `toolnexus`, created by `toolnexus-serve db upgrade`, see
`migrations/`):
  tasks     id, doc (JSON snapshot), seq, base, state, ts (status time),
            o / c (owner / context digests), cj (contextId as JSON), mkey
            (unique: one task per message key), heartbeat / sent /
            interrupted / expires (the time indexes: partial indexes, each
            holding only the tasks it could return)
  events    (task_id, seq) -> one JSON event: the log, and the tail after
            the snapshot (`seq > base`)
  history   (task_id, seq) -> (ts, state): status changes, for listings
  contexts  c -> o: a context's owner
  counts    how many tasks each owner has, in each context and state, kept
            by triggers (migration 0012): a listing's total
  beat      the reaper's last run
  documents small documents (`shared.stores.sql.documents`): the turn
            book, each owner's send limits

Each write is one statement calling a function (`create_task`,
`write_task`, `claim_task`), so the compare, the append, the index columns,
the log's trim and the notification commit together, in one round trip.
The clock is the caller's (as on Redis): what the time indexes hold is
comparable with the cutoffs the reaper passes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from shared.codec import decode, encode
from shared.errors import ConfigError, ContextTaken, StoreError
from shared.events import Event, StatusUpdate, context_of, current_status
from shared.keys import digest
from shared.ops.store_metrics import count_failover
from shared.owners.book import DocumentBook
from shared.push.contract import Once
from shared.store.claim_text import claim_text
from shared.store.contract import (
    LOG_LIMIT,
    Commit,
    Created,
    Outcome,
    Record,
    is_safe_id,
    require_safe_id,
)
from shared.store.features import DocumentFeatures
from shared.store.listing import WINDOW, Listing, Query
from shared.store.spec import POSTGRES_TIMEOUT
from shared.store.wakeups import Waiter
from shared.stores.postgres.listener import PostgresListener
from shared.stores.postgres.listing import answer
from shared.stores.postgres.pool import ForkSafePool
from shared.stores.postgres.records import TAIL, record_of
from shared.stores.postgres.schema import DEFAULT_SCHEMA, behind, checked_schema
from shared.stores.postgres.session import session_settings, with_keepalives
from shared.stores.postgres.statements import KeyTaken, PostgresRunner, Statements
from shared.stores.sql.documents import SqlDocuments
from shared.stores.sql.indexes import SqlIndexes
from shared.task import Task, epoch, is_terminal, state_of

log = logging.getLogger(__name__)

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

_READ = f"SELECT t.doc, t.seq, {TAIL} FROM tasks t WHERE t.id = %s AND alive(t.expires, %s::float8)"
_CREATE = (
    "SELECT outcome, named FROM create_task(%s, %s, %s, %s::float8, %s, %s, %s,"
    " %s::text, %s::text, %s::float8, %s::float8, %s::bigint, %s)"
)
_WRITE = (
    "SELECT write_task(%s, %s::bigint, %s::text, %s, %s::float8, %s, %s, %s,"
    " %s::text[], %s::float8, %s::float8, %s::float8, %s::bigint, %s)"
)
_CLAIM = (
    "SELECT outcome, doc, seq, tail FROM claim_task(%s, %s, %s, %s::float8, %s, %s, %s,"
    " %s::float8, %s::float8, %s::float8, %s::bigint, %s)"
)
_EVENTS = (
    "SELECT e.seq, e.body FROM events e WHERE e.task_id = %s AND e.seq > %s::bigint"
    " AND EXISTS (SELECT 1 FROM tasks t WHERE t.id = e.task_id"
    " AND alive(t.expires, %s::float8)) ORDER BY e.seq LIMIT %s::bigint"
)
_PURGE = """
WITH gone AS (
  DELETE FROM tasks WHERE id IN (
    SELECT id FROM tasks WHERE expires <= %s::float8 ORDER BY expires LIMIT 1000
    FOR UPDATE SKIP LOCKED)
  RETURNING id, c),
logs AS (DELETE FROM events WHERE task_id IN (SELECT id FROM gone)),
changes AS (DELETE FROM history WHERE task_id IN (SELECT id FROM gone)),
owners AS (
  DELETE FROM contexts x WHERE x.c IN (SELECT c FROM gone)
  AND NOT EXISTS (SELECT 1 FROM tasks t
                  WHERE t.c = x.c AND t.o = x.o AND t.id NOT IN (SELECT id FROM gone)))
SELECT count(*) FROM gone
"""


class PostgresStore(DocumentFeatures):
    documents: SqlDocuments
    lists_by_scan = False  # ListTasks reads the page from the indexes

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
        self._ttl = float(terminal_ttl) if terminal_ttl else 0.0
        self._clock = clock
        self._log_limit = log_limit
        self._session = session_settings(self.schema, timeout)
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
        # Small documents (shared.documents), under the features that keep state.
        runner = PostgresRunner(self.statements)
        self.documents = SqlDocuments(runner)
        self.indexes = SqlIndexes(runner)
        self._listener = PostgresListener(
            self.conninfo, channel, self._newest, notify=notify, timeout=timeout
        )
        self._push = Once()
        self._turns = DocumentBook(self.documents)
        self._primary: str | None = None  # the server new connections last landed on
        self._primary_lock = threading.Lock()

    # --- the contract ------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        record = self.read(task_id)
        return record.task if record is not None else None

    def save(self, task: Task) -> Task:
        require_safe_id(task.get("id"))
        self._write(task, [current_status(task)], expected=None, snapshot=True)
        return task

    # --- EventStore ----------------------------------------------------------

    def create(
        self, task: Task, message_key: str | None = None, supersedes: str | None = None
    ) -> Created:
        task_id = require_safe_id(task.get("id"))
        status_time, owner, context = self._listed(task)
        args = (
            task_id,
            encode(task),
            encode(current_status(task)),
            status_time,
            owner,
            context,
            encode(task["contextId"]),
            message_key,
            supersedes,
            self._clock(),
            WINDOW,
            self._log_limit,
            self._channel,
        )
        for _ in range(_CREATE_ATTEMPTS):
            try:
                outcome, found = self.statements.one(_CREATE, args)
                break
            except KeyTaken:
                continue  # a concurrent create took the key first: this one now finds it
        else:
            raise StoreError(
                f"task store unavailable: PostgreSQL at {self._where}: the message key of"
                f" task {task_id} stayed contended",
                "PostgreSQL refused the statement",
            )
        if outcome == "context":
            raise ContextTaken(f"context {task['contextId']} belongs to another caller")
        if outcome == "existing":
            earlier = self.get(found)
            if earlier is not None:
                return Created(earlier, False)
            return self.create(task, message_key, supersedes)  # it expired meanwhile
        return Created(task, True)

    def read(self, task_id: str) -> Record | None:
        if not is_safe_id(task_id):
            return None
        row = self.statements.maybe(_READ, (task_id, self._clock()))
        return record_of(*row) if row is not None else None

    def commit(self, commit: Commit) -> bool:
        return self._write(
            commit.task, commit.events, expected=commit.expected, snapshot=commit.snapshot
        )

    def claim(self, task_id: str, from_state: str, event: StatusUpdate) -> Outcome | None:
        if not is_safe_id(task_id):
            return Outcome(False, None)
        # The event as text, split where the function puts the stored context
        # id and the generation it counts on from the task's.
        before, between, after = claim_text(event)
        state = event["status"]["state"]
        ttl = self._ttl if self._ttl and is_terminal(state) else 0.0
        args = (
            task_id,
            from_state,
            state,
            epoch(event["status"]["timestamp"]),
            before,
            between,
            after,
            self._clock(),
            ttl,
            WINDOW,
            self._log_limit,
            self._channel,
        )
        outcome, doc, seq, tail = self.statements.one(_CLAIM, args)
        record = record_of(doc, seq, tail) if outcome != "unknown" else None
        return Outcome(outcome == "claimed" and record is not None, record)

    def events(self, task_id: str, after: int, limit: int | None = None) -> list[tuple[int, Event]]:
        if not is_safe_id(task_id):
            return []
        rows = self.statements.rows(_EVENTS, (task_id, after, self._clock(), limit))
        return [(int(seq), decode(body)) for seq, body in rows]

    def watch(self, task_id: str) -> AbstractContextManager[Waiter]:
        return self._listener.watch(task_id)

    # --- listing and the time indexes ---------------------------------------

    def all(self) -> dict[str, Task]:
        rows = self.statements.rows(
            f"SELECT t.id, t.doc, t.seq, {TAIL} FROM tasks t WHERE alive(t.expires, %s::float8)",
            (self._clock(),),
        )
        tasks: dict[str, Task] = {}
        for task_id, doc, seq, tail in rows:
            record = record_of(doc, seq, tail)
            if record is not None:
                tasks[task_id] = record.task
        return tasks

    def listing(self, query: Query) -> Listing:
        with self.statements.connection() as conn:
            return answer(conn, query, self._clock())

    def heartbeat(self, *task_ids: str) -> None:
        if not task_ids:
            return
        # Only rows still working: a task that left `working` stays out.
        self.statements.run(
            "UPDATE tasks SET heartbeat = %s::float8"
            " WHERE id = ANY(%s::text[]) AND heartbeat IS NOT NULL",
            (self._clock(), list(task_ids)),
        )

    def stale(self, cutoff: float) -> list[str]:
        return self._older("heartbeat", cutoff)

    def waiting(self, cutoff: float) -> list[str]:
        return self._older("sent", cutoff)

    def interrupted(self, cutoff: float) -> list[str]:
        return self._older("interrupted", cutoff)

    def resent(self, task_id: str) -> None:
        self.statements.run(
            "UPDATE tasks SET sent = %s::float8 WHERE id = %s AND sent IS NOT NULL",
            (self._clock(), task_id),
        )

    def record_beat(self) -> None:
        self.statements.run(
            "INSERT INTO beat VALUES ('reaper', %s::float8)"
            " ON CONFLICT (name) DO UPDATE SET at = excluded.at",
            (self._clock(),),
        )

    def last_beat(self) -> float | None:
        row = self.statements.maybe("SELECT at FROM beat WHERE name = 'reaper'", ())
        return float(row[0]) if row is not None else None

    def purge_expired(self) -> int:
        """Finished tasks past their time, with their logs, histories and
        message keys (on the row); up to 1,000 a run. Then the kept counts
        folded (migration 0012)."""
        purged = int(self.statements.one(_PURGE, (self._clock(),))[0])
        self.statements.one("SELECT counts_fold()", ())
        self.documents.forget_expired()
        return purged

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
                "INSERT INTO beat VALUES ('ready', %s::float8)"
                " ON CONFLICT (name) DO UPDATE SET at = excluded.at",
                (self._clock(),),
            )
            return _node(conn)

    def close(self) -> None:
        self._pool.close()

    def _accepted(self, message_key: str) -> str | None:
        """The task a message made, while it is kept."""
        row = self.statements.maybe(
            "SELECT id FROM tasks WHERE mkey = %s AND alive(expires, %s::float8)",
            (message_key, self._clock()),
        )
        return str(row[0]) if row is not None else None

    def turn_book(self) -> DocumentBook:
        return self._turns

    # --- internals -----------------------------------------------------------

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

    def _write(
        self, task: Task, events: Sequence[Event], *, expected: int | None, snapshot: bool
    ) -> bool:
        task_id = require_safe_id(task.get("id"))
        state = state_of(task)
        status_time, owner, context = self._listed(task)
        args = (
            task_id,
            expected,
            encode(task) if snapshot else None,
            state,
            status_time,
            owner,
            context,
            encode(context_of(task)),
            [encode(event) for event in events],
            self._clock(),
            self._ttl if self._ttl and is_terminal(state) else 0.0,
            WINDOW,
            self._log_limit,
            self._channel,
        )
        return self.statements.one(_WRITE, args)[0] is not None

    def _newest(self, task_ids: list[str]) -> list[int | None]:
        rows = self.statements.rows(
            "SELECT id, seq FROM tasks WHERE id = ANY(%s::text[])", (task_ids,)
        )
        found = {task_id: int(seq) for task_id, seq in rows}
        return [found.get(task_id) for task_id in task_ids]

    def _listed(self, task: Task) -> tuple[float, str, str]:
        status_time = epoch(task["status"].get("timestamp", ""))
        return status_time, digest(task.get("owner", "")), digest(context_of(task))

    def _older(self, column: str, cutoff: float) -> list[str]:
        rows = self.statements.rows(f"SELECT id FROM tasks WHERE {column} < %s::float8", (cutoff,))
        return [task_id for (task_id,) in rows]


_CREATE_ATTEMPTS = 5


# Stands for the context id in a claim's event text; no context id is this.


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
