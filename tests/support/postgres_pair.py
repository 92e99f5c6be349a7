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

PostgreSQL refuses to run as root: as root, the servers run as the
`postgres` user (`runuser`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from shared.stores.postgres import schema
from tests.support.ports import free_port
from tests.support.redis_server import ci
from tests.support.sockets import process_tree


def binaries() -> Path | None:
    """The folder holding initdb, pg_ctl and pg_basebackup, if any."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True)
    return candidates[0].parent if candidates else None


def require_binaries() -> Path:
    folder = binaries()
    if folder is None or not (folder / "pg_basebackup").exists():
        message = "NO POSTGRESQL SERVER BINARIES (initdb, pg_ctl, pg_basebackup): standby tests"
        if ci():
            pytest.fail(message + " cannot run under CI=true")
        pytest.skip(message + " skipped")
    return folder


class PostgresPair:
    def __init__(self, *, synchronous: bool) -> None:
        self.bin = require_binaries()
        self.synchronous = synchronous
        self.root = Path(tempfile.mkdtemp(prefix="toolnexus-pg-pair-"))
        self.primary_dir, self.standby_dir = self.root / "primary", self.root / "standby"
        self.primary_port, self.standby_port = free_port(), free_port()
        self.schema = "failover"

    # --- running the servers ------------------------------------------------

    def _as_owner(self, *command: str) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", "postgres", "--", *command]
        return list(command)

    def _run(self, *command: str) -> None:
        subprocess.run(
            self._as_owner(*command), check=True, capture_output=True, timeout=120, cwd=self.root
        )

    def start(self) -> PostgresPair:
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.primary_dir),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
        )
        with (self.primary_dir / "postgresql.conf").open("a") as conf:
            conf.write(
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.root}'\n"
                "wal_level = replica\nmax_wal_senders = 5\nhot_standby = on\n"
                # A crash of the processes, not of the machine, is the fault here.
                "fsync = off\nfull_page_writes = off\n"
            )
        self._start(self.primary_dir, self.primary_port)
        self._run(
            str(self.bin / "pg_basebackup"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.primary_port),
            "-U",
            "postgres",
            "-D",
            str(self.standby_dir),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
        )
        self._start(self.standby_dir, self.standby_port)
        with self.connect(self.primary_port) as conn:
            schema.upgrade(conn, self.schema)
            if self.synchronous:
                conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.execute("SELECT pg_reload_conf()")
        self._wait_streaming()
        return self

    def _start(self, folder: Path, port: int) -> None:
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(folder),
            "-l",
            str(folder / "server.log"),
            "-o",
            f"-p {port}",
            "-w",
            "-t",
            "60",
            "start",
        )

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
        return psycopg.connect(
            host="127.0.0.1",
            port=port,
            user="postgres",
            dbname="postgres",
            autocommit=True,
            connect_timeout=3,
        )

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
        pid = int((self.primary_dir / "postmaster.pid").read_text().split()[0])
        for each in process_tree(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(each, signal.SIGKILL)

    def promote(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.standby_dir), "-w", "promote")

    def close(self) -> None:
        for folder in (self.standby_dir, self.primary_dir):
            if (folder / "postmaster.pid").exists():
                subprocess.run(
                    self._as_owner(
                        str(self.bin / "pg_ctl"), "-D", str(folder), "-m", "immediate", "stop"
                    ),
                    capture_output=True,
                    timeout=60,
                    check=False,
                )
        shutil.rmtree(self.root, ignore_errors=True)
