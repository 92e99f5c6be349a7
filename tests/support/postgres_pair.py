"""A replicated PostgreSQL as production runs it: a primary and a streaming
standby made with `pg_basebackup -R`, both real `postgres` servers of the
machine's installation on loopback, each in a folder of its own.

`synchronous=True` makes the primary wait for the standby on every commit
(`synchronous_standby_names = '*'`, set after the copy so the standby,
once promoted, does not wait for a standby it does not have).
`kill_primary()` is a crash of every process of the primary;
`promote()` is what an orchestrator (Patroni, a managed service, an
operator with `pg_ctl promote`) does next. The old primary is not brought
back: it would come up as a second primary; rejoining it takes
`pg_rewind`, which is the orchestrator's part.
Each is a `PostgresServer`.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import psycopg

from shared.stores.postgres import schema
from tests.support.postgres_server import PostgresServer, owned_folder, require_binaries


class PostgresPair:
    def __init__(self, *, synchronous: bool) -> None:
        folder = require_binaries()
        self.synchronous = synchronous
        self.root = owned_folder("toolnexus-pg-pair-")
        self.primary = PostgresServer(self.root / "primary", bin=folder)
        self.standby = PostgresServer(self.root / "standby", bin=folder)
        self.primary_port, self.standby_port = self.primary.port, self.standby.port
        self.schema = "failover"

    # --- running the servers ------------------------------------------------

    def start(self) -> PostgresPair:
        self.primary.initdb("wal_level = replica\nmax_wal_senders = 5\nhot_standby = on\n")
        self.primary.start()
        self.primary.run(
            str(self.primary.bin / "pg_basebackup"), "-h", "127.0.0.1",
            "-p", str(self.primary_port), "-U", "postgres", "-D", str(self.standby.data),
            "-R", "-X", "stream", "-c", "fast",
        )  # fmt: skip
        self.standby.start()
        with self.connect(self.primary_port) as conn:
            schema.upgrade(conn, self.schema)
            if self.synchronous:
                conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.execute("SELECT pg_reload_conf()")
        self._wait_streaming()
        return self

    def _wait_streaming(self, timeout: float = 30.0) -> None:
        wanted = "sync" if self.synchronous else "async"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.connect(self.primary_port) as conn:
                states = [
                    row[0]
                    for row in conn.execute(
                        "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'"
                    )
                ]
            if wanted in states:
                return
            time.sleep(0.05)
        raise TimeoutError(f"the standby did not stream ({wanted}) in time")

    def connect(self, port: int) -> psycopg.Connection[Any]:
        server = self.primary if port == self.primary_port else self.standby
        return server.connect()

    # --- what the service is given ------------------------------------------

    @property
    def url(self) -> str:
        """Both hosts; libpq connects to whichever takes writes."""
        hosts = f"127.0.0.1:{self.primary_port},127.0.0.1:{self.standby_port}"
        return (
            f"postgresql://postgres@{hosts}/postgres"
            f"?target_session_attrs=read-write&schema={self.schema}"
        )

    # --- faults -----------------------------------------------------------------

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster and every process it started."""
        self.primary.kill()

    def promote(self) -> None:
        self.standby.run(
            str(self.standby.bin / "pg_ctl"), "-D", str(self.standby.data), "-w", "promote"
        )

    def close(self) -> None:
        for server in (self.standby, self.primary):
            server.stop()
        shutil.rmtree(self.root, ignore_errors=True)
