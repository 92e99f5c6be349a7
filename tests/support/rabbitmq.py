"""RabbitMQ for tests: a private virtual host on the machine's server, or a
private server of our own.

The machine's RabbitMQ (127.0.0.1:5672, guest/guest) is shared, so a test
run gets a virtual host of its own, made and deleted with `rabbitmqctl`
(each call starts an Erlang VM: seconds, so one per pytest process, and
each deployment on it takes queue names of its own). A test that takes the
broker away cannot stop the shared server: it starts a `rabbitmq-server`
of its own on free ports, with its own node name and data directory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.redis_server import free_port

HOST, PORT = "127.0.0.1", 5672
USER = PASSWORD = "guest"


class NoRabbitMQ(Exception):
    """No RabbitMQ to test against here (the reason says why)."""


def _rabbitmqctl(*args: str, node: str | None = None, env: dict[str, str] | None = None) -> str:
    binary = shutil.which("rabbitmqctl")
    if binary is None:
        raise NoRabbitMQ("rabbitmqctl is not on PATH")
    command = [binary, *(["-n", node] if node else []), *args]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )
    if done.returncode != 0:
        raise NoRabbitMQ(f"{' '.join(command[1:])}: {(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


class Vhost:
    """A virtual host of this test run's own on the machine's RabbitMQ."""

    def __init__(self) -> None:
        self.name = f"toolnexus-test-{os.getpid()}-{secrets.token_hex(4)}"

    @property
    def url(self) -> str:
        return f"amqp://{USER}:{PASSWORD}@{HOST}:{PORT}/{self.name}"

    def create(self) -> Vhost:
        if not _answers(HOST, PORT):
            raise NoRabbitMQ(f"nothing answers on {HOST}:{PORT}")
        _rabbitmqctl("add_vhost", self.name)
        _rabbitmqctl("set_permissions", "-p", self.name, USER, ".*", ".*", ".*")
        return self

    def delete(self) -> None:
        # A server gone away keeps nothing of ours either.
        with contextlib.suppress(NoRabbitMQ):
            _rabbitmqctl("delete_vhost", self.name)


class PrivateServer:
    """A `rabbitmq-server` of our own (as root: it runs as the rabbitmq user's
    files would, in a temporary directory), stopped and started again on the
    same ports and data, so a test can stage a broker outage."""

    def __init__(self) -> None:
        if shutil.which("rabbitmq-server") is None:
            raise NoRabbitMQ("rabbitmq-server is not on PATH")
        self.port = free_port()
        self.dist_port = free_port()
        self.node = f"toolnexus-test-{secrets.token_hex(4)}@localhost"
        self.directory = Path(tempfile.mkdtemp(prefix="toolnexus-rabbit-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.env = {
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.directory / "log"),
            "RABBITMQ_PID_FILE": str(self.directory / "rabbit.pid"),
            # No plugins (the machine's enabled_plugins file is not ours), and
            # guest may log in from 127.0.0.1 as on any fresh server.
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.directory / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.directory / "rabbitmq"),
        }
        (self.directory / "enabled_plugins").write_text("[].\n")
        (self.directory / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
        )
        # Run as root, the server's script switches to the rabbitmq user,
        # which must own what the node writes.
        if os.geteuid() == 0 and shutil.which("chown"):
            subprocess.run(["chown", "-R", "rabbitmq:", str(self.directory)], check=False)

    @property
    def url(self) -> str:
        return f"amqp://{USER}:{PASSWORD}@127.0.0.1:{self.port}//"

    def start(self, timeout: float = 90.0) -> PrivateServer:
        log = (self.directory / "server.out").open("ab")
        self.process = subprocess.Popen(
            ["rabbitmq-server"],
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NoRabbitMQ(f"rabbitmq-server exited: {self.output()[-500:]}")
            if _answers("127.0.0.1", self.port):
                return self
            time.sleep(0.2)
        raise NoRabbitMQ(f"rabbitmq-server did not listen on {self.port} in {timeout:g} s")

    def output(self) -> str:
        path = self.directory / "server.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """SIGTERM to the node itself (the script that started it may be
        gone, or in another session after switching user), until its port
        closes."""
        pid_file = self.directory / "rabbit.pid"
        if pid_file.exists() and (text := pid_file.read_text().strip()).isdigit():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(text), 15)
        deadline = time.monotonic() + 60
        while _answers("127.0.0.1", self.port) and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.process is not None:
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None
        pid_file.unlink(missing_ok=True)
        # epmd (Erlang's port mapper) is shared by every node here and stays.

    def kill(self) -> None:
        """SIGKILL the node (a crash: no queue is closed cleanly), until its
        port closes; `start()` brings it up again on its data."""
        pid_file = self.directory / "rabbit.pid"
        if pid_file.exists() and (text := pid_file.read_text().strip()).isdigit():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(text), signal.SIGKILL)
        deadline = time.monotonic() + 30
        while _answers("127.0.0.1", self.port) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(30)
        self.process = None
        pid_file.unlink(missing_ok=True)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
