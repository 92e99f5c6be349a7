"""Private `redis-server` processes for tests, so no test touches the
machine's shared Redis on 6379 and parallel runs never clobber each other."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis

from tests.support.ports import free_port


class RedisServer:
    """One redis-server on a free port; `stop()` and `start()` again keep the
    port and the data directory, so a test can stage an outage.

    `args` go first on its command line (compose.yaml's redis command, say);
    the port, directory, persistence and `password` given here win over them.
    """

    def __init__(
        self,
        *,
        appendonly: bool = False,
        port: int | None = None,
        password: str | None = None,
        args: Sequence[str] = (),
        bind: str = "127.0.0.1",
        appendfsync: str = "always",
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server is not on PATH")
        self.binary = binary
        self.port = port or free_port()
        self.appendonly = appendonly
        self.appendfsync = appendfsync  # "everysec": what compose runs, a second at risk
        self.password = password
        self.args = list(args)
        self.bind = bind  # "* -::*": every interface (protected-mode tests)
        self.directory = Path(tempfile.mkdtemp(prefix="toolnexus-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        login = f":{self.password}@" if self.password else ""
        return f"redis://{login}127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> RedisServer:
        command = [
            self.binary,
            *self.args,
            "--port", str(self.port),
            "--bind", self.bind,
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--logfile", str(self.directory / "redis.log"),
            *(["--requirepass", self.password] if self.password else []),
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        client = redis.Redis(port=self.port, password=self.password, socket_connect_timeout=0.2)
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited: {self.process.stderr!r}")
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                time.sleep(0.02)
        raise TimeoutError(f"redis-server on port {self.port} did not answer in {timeout}s")

    def online_replicas(self) -> int:
        """How many replicas follow this server and are in sync with it."""
        client = redis.Redis(port=self.port, password=self.password, socket_timeout=1.0)
        try:
            info = client.info("replication")
        finally:
            client.close()
        followers = [value for key, value in info.items() if key.startswith("slave")]
        return sum(isinstance(f, dict) and f.get("state") == "online" for f in followers)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            # A paused server acts on SIGTERM only once it runs again.
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                # A master waits up to its shutdown-timeout for lagging replicas
                # (one mid-resync after a failover): past that, it is killed.
                self.process.kill()
                self.process.wait(10)
        self.process = None

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to write anything on the way out."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None

    def pause(self) -> None:
        """SIGSTOP: the server keeps its port, and the kernel keeps accepting
        connections on it, but nothing is ever answered (a hung host)."""
        assert self.process is not None and self.process.poll() is None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


def ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def on_database(url: str, database: int) -> str:
    """`url` on `database`: its path for redis:// and rediss://, else its `db` parameter."""
    parts = urlsplit(url)
    if parts.scheme in ("redis", "rediss"):
        return urlunsplit(parts._replace(path=f"/{database}"))
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "db"] + [("db", str(database))]
    return f"{url.partition('?')[0]}?{urlencode(query)}"
