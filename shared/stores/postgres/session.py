"""What every connection of the store tells the server, and how long it waits for it.

A session whose client is gone keeps what it holds (a transaction, its row
locks) until the server notices, and a client waiting for an answer that
will never come waits for ever: TCP alone takes two hours to give up on a
silent peer. So each side is told to give up within the store's timeout
(`TOOLNEXUS_PG_TIMEOUT`, `timeout` here):

- the server ends a statement that runs longer than `timeout`
  (`statement_timeout`), gives up a lock wait as long (`lock_timeout`: its
  holder is stuck), ends a session left idle inside a
  transaction after `timeout` (`idle_in_transaction_session_timeout`: a
  write's transaction spans two exchanges, each ended by a Sync so that
  the server counts the wait between them as idle; a client that stops or
  vanishes there holds its locks no longer than that), and probes a quiet client after `timeout`,
  dropping it after three unanswered probes a second apart or data
  unacknowledged for `timeout` + 3 s (`tcp_keepalives_*`,
  `tcp_user_timeout`);
- the client probes the server the same way (libpq's `keepalives*` and
  `tcp_user_timeout`, unless the URL sets them), and waits at most
  `timeout` + 1 s for any answer: past that the connection is abandoned
  (closed, so the pool makes a new one) and the call fails with a
  StoreError. The extra second lets a server that is merely slow answer
  with its own statement timeout first.

The server's settings go in one statement when the pool opens a connection
(`session_settings`), not in the startup packet, so a pooler that refuses
startup options (PgBouncer) passes them on as any other statement.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg
from psycopg.abc import RV, PQGen
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import ConnStatus, TransactionStatus

from shared.stores.postgres.green import on_hub

# Keepalive probes before a peer is dropped, a second apart.
PROBES: Final = 3
# The name the store's sessions go by, where the URL names none: the upkeep
# ends stuck sessions of this name only (`STUCK_SESSIONS`).
APPLICATION_NAME: Final = "toolnexus-serve"
# The store's own sessions (its application name, its database) that wait
# for their client in the middle of an exchange (a statement sent, the Sync
# that ends the exchange not yet) or to send it an answer, for longer than
# the store's timeout: no server timeout ends these (a statement's ended,
# the wait is no idle time in a transaction, and the server acts on no
# cancel while it writes to its client), so a client lost there would keep
# its locks for good. Each is ended; the count comes back.
STUCK_SESSIONS: Final = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
    " WHERE pid <> pg_backend_pid() AND datname = current_database()"
    " AND application_name = current_setting('application_name')"
    " AND state = 'active' AND wait_event IN ('ClientRead', 'ClientWrite')"
    " AND state_change < now() - make_interval(secs => %s)"
)
# What the client waits beyond the statement timeout before abandoning a connection.
GRACE: Final = 1.0


def server_settings(timeout: float) -> dict[str, str]:
    """The session settings every connection sets, for a store timeout of `timeout` s."""
    seconds = max(1, round(timeout))
    return {
        "statement_timeout": f"{round(timeout * 1000)}ms",
        "lock_timeout": f"{round(timeout * 1000)}ms",
        "idle_in_transaction_session_timeout": f"{round(timeout * 1000)}ms",
        "tcp_keepalives_idle": str(seconds),
        "tcp_keepalives_interval": "1",
        "tcp_keepalives_count": str(PROBES),
        "tcp_user_timeout": f"{round((timeout + PROBES) * 1000)}ms",
    }


def session_settings(schema: str, timeout: float) -> tuple[str, tuple[str, ...]]:
    """One statement (and its arguments) that sets the search path and every
    server setting above for the session."""
    settings = {"search_path": schema, **server_settings(timeout)}
    calls = ", ".join("set_config(%s, %s, false)" for _ in settings)
    args = tuple(text for pair in settings.items() for text in pair)
    return f"SELECT {calls}", args


def with_keepalives(conninfo: str, timeout: float) -> str:
    """`conninfo` with libpq's own probes of the server, and the name the
    store's sessions go by, where it sets none."""
    params = conninfo_to_dict(conninfo)
    wanted = {
        "application_name": APPLICATION_NAME,
        "keepalives": "1",
        "keepalives_idle": str(max(1, round(timeout))),
        "keepalives_interval": "1",
        "keepalives_count": str(PROBES),
        "tcp_user_timeout": str(round((timeout + PROBES) * 1000)),
    }
    return make_conninfo(conninfo, **{k: v for k, v in wanted.items() if k not in params})


class Abandoned(psycopg.OperationalError):
    """No answer came within the deadline: the connection was closed."""


class DeadlineConnection(psycopg.Connection[Any]):
    """A connection whose every wait for the server ends within `answer_within`
    seconds; past that the connection is closed and the call raises
    `Abandoned`. psycopg drives every statement, fetch and
    pipeline through `Connection.wait` (not a documented API: the store's
    tests fail by name should it stop doing so)."""

    answer_within: float | None = None
    green = False  # wait on gevent's hub (`shared.stores.postgres.green`)

    def wait(self, gen: PQGen[RV], interval: float = 0.1, timeout: float | None = None) -> RV:
        if timeout is not None or self.answer_within is None:
            # The bounded waits psycopg makes itself (a cancel): its own.
            return super().wait(gen, interval, timeout)
        try:
            if self.green:
                return on_hub(gen, self.pgconn.socket, self.answer_within)
            return super().wait(gen, interval, self.answer_within)
        except psycopg.OperationalError:
            if not self._still_waiting():
                raise  # the connection failed of itself
        self.pgconn.finish()  # abandoned: the pool drops it and opens another
        raise Abandoned(
            f"no answer from the server within {self.answer_within:g} s: connection abandoned"
        )

    def _still_waiting(self) -> bool:
        """Whether the connection is sound and a call of it still out: the
        wait gave up, the server did not."""
        return (
            self.pgconn.status == ConnStatus.OK
            and self.pgconn.transaction_status == TransactionStatus.ACTIVE
        )


def connection_class(timeout: float, *, green: bool) -> type[DeadlineConnection]:
    """The pool's connection class for a store timeout of `timeout` seconds."""
    return type(
        "DeadlineConnection",
        (DeadlineConnection,),
        {"answer_within": timeout + GRACE, "green": green},
    )
