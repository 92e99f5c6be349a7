"""A PostgreSQL server of a test's own: a real `postgres` of the machine's
installation on a loopback port, its data in a folder of its own, so a test
can SIGKILL it and start it again on that data (the machine's server serves
others and is never stopped).

PostgreSQL refuses to run as root: as root, the server runs as the
`postgres` user (`runuser`), which owns the folder.
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
        message = "NO POSTGRESQL SERVER BINARIES (initdb, pg_ctl, pg_basebackup): these tests"
        if ci():
            pytest.fail(message + " cannot run under CI=true")
        pytest.skip(message + " are skipped")
    return folder


def owned_folder(prefix: str) -> Path:
    """A new temporary folder the server's user may write in."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
    return root


class PostgresServer:
    """One server: `data` is its data folder (made by `initdb`, or by the
    caller, as `pg_basebackup` makes a standby's), `port` its port."""

    SCHEMA = "toolnexus"

    def __init__(self, data: Path, port: int | None = None, *, bin: Path | None = None) -> None:
        self.bin = bin or require_binaries()
        self.data = data
        self.port = port or free_port()

    # --- running it -----------------------------------------------------------

    def run(self, *command: str, check: bool = True) -> None:
        """A server program (initdb, pg_ctl, pg_basebackup) as the server's user."""
        owned = ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command
        subprocess.run(owned, check=check, capture_output=True, timeout=120, cwd=self.data.parent)

    def initdb(self, settings: str = "") -> PostgresServer:
        """A fresh cluster, listening on loopback only, with `settings` added
        to its postgresql.conf."""
        self.run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "--no-sync",
        )  # fmt: skip
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                "listen_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.data.parent}'\n"
                # A crash of the processes, not of the machine, is the fault here:
                # what was written is in the page cache when the server restarts.
                "fsync = off\nfull_page_writes = off\n" + settings
            )
        return self

    def start(self) -> PostgresServer:
        """Start it on its data (after a kill: crash recovery first)."""
        self.run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.data / "server.log"),
            "-o", f"-p {self.port}", "-w", "-t", "60", "start",
        )  # fmt: skip
        return self

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            user="postgres",
            dbname="postgres",
            autocommit=True,
            connect_timeout=3,
        )

    def migrated(self, name: str = SCHEMA) -> str:
        """The store URL of schema `name`, migrated by `db upgrade`'s own code."""
        with self.connect() as conn:
            schema.upgrade(conn, name)
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres?schema={name}"

    # --- faults -----------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL the postmaster and every process it started."""
        pid_file = self.data / "postmaster.pid"
        if not pid_file.exists():
            return
        processes = process_tree(int(pid_file.read_text().split()[0]))
        for each in processes:
            with contextlib.suppress(ProcessLookupError):
                os.kill(each, signal.SIGKILL)
        # Gone, not dying: a postmaster.pid naming a live process keeps the
        # next start out.
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{each}").exists() for each in processes):
            if time.monotonic() > deadline:
                raise TimeoutError(f"PostgreSQL's processes {processes} outlived SIGKILL")
            time.sleep(0.02)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            pg_ctl = str(self.bin / "pg_ctl")
            self.run(pg_ctl, "-D", str(self.data), "-m", "immediate", "stop", check=False)


class PrivatePostgres(PostgresServer):
    """A server in a temporary folder of its own, removed by `close`."""

    def __init__(self) -> None:
        self.root = owned_folder("toolnexus-pg-")
        super().__init__(self.root / "data")

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
