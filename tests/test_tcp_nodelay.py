"""Every server of the project has TCP_NODELAY on the connections it accepts.

A response leaves in more than one write; with Nagle's algorithm on, the
last one waits for the client's delayed ACK of the first. Each test opens a
real TCP connection, makes one request, and reads the option on the
server's end of that very connection (tests/support/sockets.py):

- `listening_socket` sets it on the listener, and what it accepts inherits it;
- the embedded server (`gevent_server`) sets it on every TCP connection, IPv4
  and IPv6, whatever its listener, and serves a Unix socket as before;
- the metrics port sets it on every connection;
- `toolnexus-serve` has it on a keep-alive connection, on an event stream and
  on its gRPC port; `toolnexus-serve web` (gunicorn) and `toolnexus-serve
  grpc` (gRPC's core) have it on their own.

A server in another process is read through `pidfd_getfd`; where that is
missing those tests are skipped, saying so, and fail under CI=true.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import gevent
import gevent.socket
import grpc
import pytest
import requests
from a2a.types import GetTaskRequest, a2a_pb2_grpc

from shared.addresses import listening_socket
from shared.ops.metrics import serve_metrics
from tests.support.embedded import ROOT
from tests.support.polling import wait_for
from tests.support.redis_server import ci, free_port
from tests.support.sockets import (
    NoPidfdGetfd,
    duplicated,
    own_ports_to,
    pidfd_getfd_missing,
    server_end,
    tcp_nodelay,
)
from web.http.disconnects import SOCKET_KEY
from web.http.gevent_server import gevent_server

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def no_pidfd_getfd(reason: str) -> None:
    message = f"NO PIDFD_GETFD: {reason}; a server's end in another process cannot be read"
    if ci():
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def pidfd_getfd() -> None:
    if (missing := pidfd_getfd_missing()) is not None:
        no_pidfd_getfd(missing)


def nodelay_at(client_port: int, server_port: int, server_pid: int) -> int:
    """TCP_NODELAY on the server's end of the connection from `client_port`."""
    try:
        with duplicated(client_port, server_port, server_pid) as end:
            return tcp_nodelay(end)
    except NoPidfdGetfd as refused:
        no_pidfd_getfd(str(refused))
        raise


def ipv6_loopback() -> bool:
    try:
        with socket.create_server(("::1", 0), family=socket.AF_INET6):
            return True
    except OSError:
        return False


FAMILIES = [
    pytest.param(("127.0.0.1", socket.AF_INET), id="ipv4"),
    pytest.param(
        ("::1", socket.AF_INET6),
        id="ipv6",
        marks=pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback here"),
    ),
]


# --- in this process -----------------------------------------------------------------


@pytest.mark.parametrize("address", FAMILIES)
def test_the_listening_socket_has_tcp_nodelay_and_gives_it_to_what_it_accepts(
    address: tuple[str, socket.AddressFamily],
) -> None:
    host, _ = address
    with closing(listening_socket(host, 0)) as listener:
        assert tcp_nodelay(listener) == 1
        with socket.create_connection(listener.getsockname()[:2], timeout=10):
            accepted, _ = listener.accept()
            with accepted:
                assert tcp_nodelay(accepted) == 1


def report_nodelay(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """The option on the connection this request came on, as the body."""
    connection = environ[SOCKET_KEY]
    unix = connection.family == socket.AF_UNIX
    body = b"unix" if unix else str(tcp_nodelay(connection)).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def ask(connection: Any, path: str = "/") -> tuple[int, bytes]:
    """One keep-alive GET on `connection`: the status and the body."""
    connection.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    received = b""
    while True:
        head, found, body = received.partition(b"\r\n\r\n")
        if found:
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            if len(body) >= length:
                return int(head.split()[1]), body[:length]
        chunk = connection.recv(65536)
        assert chunk, f"the server closed the connection: {received!r}"
        received += chunk


@contextmanager
def gevent_serving(listener: socket.socket) -> Iterator[None]:
    """`gevent_server` on `listener`, run by this thread's hub while the test
    talks to it over gevent's sockets."""
    # As a listener made under gevent's patch is underneath: gevent's server
    # accepts until the backlog is empty, and a blocking accept would hang it.
    listener.setblocking(False)
    server = gevent_server(listener, report_nodelay, idle_timeout=30)
    server.start()
    try:
        yield
    finally:
        server.stop(timeout=1)
        listener.close()


@pytest.mark.parametrize("address", FAMILIES)
def test_the_gevent_server_sets_tcp_nodelay_on_every_connection(
    address: tuple[str, socket.AddressFamily],
) -> None:
    host, family = address
    # A listener without the option: the handler gives it to each connection itself.
    listener = socket.create_server((host, 0), family=family)
    assert tcp_nodelay(listener) == 0
    with gevent_serving(listener):
        connection = gevent.socket.create_connection(listener.getsockname()[:2], timeout=10)
        with connection:
            assert ask(connection) == (200, b"1")
            assert ask(connection) == (200, b"1")  # and on the keep-alive connection's next


def test_the_gevent_server_serves_a_unix_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "server.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen()
    with gevent_serving(listener):
        connection = gevent.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.settimeout(10)
        with connection:
            connection.connect(path)
            assert ask(connection) == (200, b"unix")


def test_the_metrics_port_sets_tcp_nodelay_on_every_connection() -> None:
    port = free_port()
    server = serve_metrics("127.0.0.1", port)
    assert server is not None
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            with server_end(client, os.getpid()) as end:  # accepted, the request not sent yet
                assert tcp_nodelay(end) == 1
            client.sendall(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            reply = b""
            while chunk := client.recv(65536):
                reply += chunk
        assert reply.startswith(b"HTTP/1.0 200 "), reply[:200]
    finally:
        server.shutdown()
        server.server_close()


# --- in processes of their own -------------------------------------------------------


def toolnexus_serve() -> list[str]:
    script = shutil.which("toolnexus-serve")
    return [script] if script else [sys.executable, "-m", "worker.cli.main"]


def clean_env(folder: Path, **env: str) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith("TOOLNEXUS_")}
    return {**kept, "PYTHONPATH": str(ROOT), "TOOLNEXUS_STORE": f"file:{folder / 'tasks'}", **env}


@contextmanager
def started(
    folder: Path, args: list[str], env: dict[str, str], ready: Callable[[], bool]
) -> Iterator[subprocess.Popen[bytes]]:
    """`toolnexus-serve args`, once `ready()`; stopped afterwards (gunicorn's
    master stops its workers)."""
    log = folder / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*toolnexus_serve(), *args], cwd=folder, env=env, stdout=out, stderr=subprocess.STDOUT
        )

    def up() -> bool:
        assert process.poll() is None, log.read_text(errors="replace")
        return ready()

    try:
        wait_for(up, timeout=90, interval=0.2, what=f"toolnexus-serve {' '.join(args)}")
        yield process
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def answers_health(port: int) -> Callable[[], bool]:
    def probe() -> bool:
        try:
            return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).ok
        except (requests.ConnectionError, requests.Timeout):
            return False

    return probe


# A channel of its own connection, shared with no other channel of this process.
LOCAL_POOL = [("grpc.use_local_subchannel_pool", 1)]


def answers_grpc(port: int) -> Callable[[], bool]:
    def probe() -> bool:
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=LOCAL_POOL) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=1)
            except grpc.FutureTimeoutError:
                return False
            return True

    return probe


def keep_alive_nodelay(port: int, pid: int) -> int:
    """One GET /healthz on a keep-alive connection; TCP_NODELAY on its server end."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.connect()
    assert connection.sock is not None
    client_port = connection.sock.getsockname()[1]
    try:
        connection.request("GET", "/healthz")
        reply = connection.getresponse()
        reply.read()
        assert reply.status == 200
        assert connection.sock is not None, "the server closed the connection"
        return nodelay_at(client_port, port, pid)
    finally:
        connection.close()


def grpc_nodelay(port: int, pid: int) -> int:
    """One GetTask over a fresh channel; TCP_NODELAY on its server end."""
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=LOCAL_POOL) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            stub.GetTask(
                GetTaskRequest(id="no-such-task"), metadata=[("a2a-version", "1.0")], timeout=30
            )
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND, raised.value
        (client_port,) = own_ports_to(port)
        return nodelay_at(client_port, port, pid)


class Embedded:
    def __init__(self, process: subprocess.Popen[bytes], port: int, grpc_port: int) -> None:
        self.pid, self.port, self.grpc_port = process.pid, port, grpc_port


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    folder = tmp_path_factory.mktemp("embedded")
    port, grpc_port = free_port(), free_port()
    env = clean_env(
        folder,
        TOOLNEXUS_STORE="memory",
        TOOLNEXUS_RUN="examples.agents:countdown",
        TOOLNEXUS_GRPC_URL=f"127.0.0.1:{grpc_port}",
        TOOLNEXUS_GRPC_PORT=str(grpc_port),
    )
    with started(folder, ["--port", str(port)], env, answers_health(port)) as process:
        yield Embedded(process, port, grpc_port)


def test_the_embedded_server_sets_tcp_nodelay_on_a_keep_alive_connection(
    pidfd_getfd: None, embedded: Embedded
) -> None:
    assert keep_alive_nodelay(embedded.port, embedded.pid) == 1


def test_the_embedded_server_sets_tcp_nodelay_on_an_event_stream(
    pidfd_getfd: None, embedded: Embedded
) -> None:
    message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": "0.5 20"}]}
    body = {
        "jsonrpc": "2.0",
        "id": "1",
        "method": "SendStreamingMessage",
        "params": {"message": message},
    }
    connection = http.client.HTTPConnection("127.0.0.1", embedded.port, timeout=30)
    connection.connect()
    assert connection.sock is not None
    client_port = connection.sock.getsockname()[1]
    try:
        connection.request(
            "POST",
            "/",
            json.dumps(body),
            {
                "Content-Type": "application/json",
                "Accept": "text/event-stream",
                "A2A-Version": "1.0",
            },
        )
        reply = connection.getresponse()
        assert reply.status == 200
        assert reply.getheader("Content-Type", "").startswith("text/event-stream")
        while not (line := reply.readline()).startswith(b"data:"):
            assert line, "the stream ended before its first event"
        # The stream is open (the countdown has seconds to go): its connection.
        assert nodelay_at(client_port, embedded.port, embedded.pid) == 1
    finally:
        connection.close()


def test_the_embedded_grpc_port_has_tcp_nodelay(pidfd_getfd: None, embedded: Embedded) -> None:
    assert grpc_nodelay(embedded.grpc_port, embedded.pid) == 1


def test_gunicorn_has_tcp_nodelay_on_a_keep_alive_connection(
    pidfd_getfd: None, tmp_path: Path
) -> None:
    """gunicorn sets it on its listener (gunicorn/sock.py); its workers'
    connections inherit it."""
    port = free_port()
    args = ["web", "--workers", "1", "--port", str(port)]
    with started(tmp_path, args, clean_env(tmp_path), answers_health(port)) as process:
        assert keep_alive_nodelay(port, process.pid) == 1


def test_the_grpc_process_has_tcp_nodelay(pidfd_getfd: None, tmp_path: Path) -> None:
    """gRPC's core sets it on its sockets itself."""
    port = free_port()
    args = ["grpc", "--host", "127.0.0.1", "--port", str(port)]
    env = clean_env(tmp_path, TOOLNEXUS_GRPC_GRACE="0.5")
    with started(tmp_path, args, env, answers_grpc(port)) as process:
        assert grpc_nodelay(port, process.pid) == 1
