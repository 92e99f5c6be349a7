"""One serving model in both modes: the embedded server (gevent's WSGI
server) and `toolnexus-serve web` (gunicorn's gevent workers), over real
sockets.

A chunked body is read whole, a chunked body over TOOLNEXUS_MAX_BODY gets
413 with a JSON-RPC error, on both; and the embedded process holds a
thousand idle connections with a greenlet each, not a thread.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support.polling import wait_for
from tests.support.raw_http import RawReply, exchange
from tests.support.redis_server import free_port
from web.http.gevent_server import JsonErrorHandler

MAX_BODY = 4096


def toolnexus_serve() -> list[str]:
    script = shutil.which("toolnexus-serve")
    return [script] if script else [sys.executable, "-m", "worker.cli.main"]


class Served:
    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process, self.port, self.log = process, port, log

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


def serve(folder: Path, role: list[str], **env: str) -> Served:
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLNEXUS_")}
    clean.pop("PYTHONPATH", None)
    log = folder / f"serve-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*toolnexus_serve(), *role, "--port", str(port)],
            cwd=folder,
            env={
                **clean,
                "TOOLNEXUS_STORE": f"file:{folder / 'tasks'}",
                "TOOLNEXUS_MAX_BODY": str(MAX_BODY),
                **env,
            },
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    served = Served(process, port, log)

    def healthy() -> bool:
        assert process.poll() is None, log.read_text(errors="replace")
        try:
            return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).ok
        except (requests.ConnectionError, requests.Timeout):
            return False

    wait_for(healthy, timeout=60, what=f"toolnexus-serve {' '.join(role)}")
    return served


def stop(served: Served) -> None:
    served.process.terminate()
    try:
        served.process.wait(30)
    except subprocess.TimeoutExpired:
        served.process.kill()
        served.process.wait(10)


@pytest.fixture(scope="module", params=["embedded", "web"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    role = [] if request.param == "embedded" else ["web", "--workers", "1"]
    served = serve(tmp_path_factory.mktemp(request.param), role)
    try:
        yield served
    finally:
        stop(served)


def chunked_post(body: bytes, piece: int) -> bytes:
    chunks = b"".join(
        b"%x\r\n%s\r\n" % (len(body[at : at + piece]), body[at : at + piece])
        for at in range(0, len(body), piece)
    )
    head = (
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    return head + chunks + b"0\r\n\r\n"


def get_task(task_id: str) -> bytes:
    request = {"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": task_id}}
    return json.dumps(request).encode()


def json_rpc(reply: RawReply) -> dict[str, object]:
    assert reply.headers.get("content-type", "").startswith("application/json"), reply
    payload = json.loads(reply.body)
    assert isinstance(payload, dict) and payload.get("jsonrpc") == "2.0", payload
    return payload


def test_a_chunked_body_is_read_whole(server: Served) -> None:
    reply = exchange(server.address, chunked_post(get_task("no-such-task"), piece=7))

    assert reply.status == 200, reply
    payload = json_rpc(reply)
    # The whole envelope arrived: its id, and the method's own answer.
    assert payload["id"] == 7
    assert payload["error"] == {
        "code": -32001,
        "message": "task no-such-task not found",
        "data": {"taskId": "no-such-task"},
    }


def test_a_chunked_body_over_the_limit_is_refused_with_413_json(server: Served) -> None:
    too_large = get_task("x" * (MAX_BODY + 100))

    reply = exchange(server.address, chunked_post(too_large, piece=1000))

    assert reply.status == 413, reply
    error = json_rpc(reply)["error"]
    assert isinstance(error, dict) and "too large" in str(error["message"])
    # ... and the server serves on.
    assert exchange(server.address, chunked_post(get_task("t"), piece=3)).status == 200


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def sockets_of(pid: int) -> int:
    folder = Path(f"/proc/{pid}/fd")
    count = 0
    for entry in folder.iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            count += os.readlink(entry).startswith("socket:")
    return count


def room_for_a_thousand_sockets() -> None:
    """Raise this process's open-file limit (often 1,024) within its hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1200:
        pytest.fail("the open-file limit is below 1,200: cannot hold 1,000 connections")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
def test_a_thousand_idle_connections_cost_no_thread_each(tmp_path: Path) -> None:
    room_for_a_thousand_sockets()  # here and in the server, which inherits the limit
    served = serve(tmp_path, [], TOOLNEXUS_IDLE_TIMEOUT="120")
    pid = served.process.pid
    before = threads_of(pid)
    idle: list[socket.socket] = []
    try:
        for _ in range(1000):
            idle.append(socket.create_connection(served.address, timeout=10))
        # Accepted, each with its handler waiting for a request, not merely queued.
        wait_for(lambda: sockets_of(pid) >= 1000, timeout=60, interval=0.2, what="1,000 open")
        with_open = threads_of(pid)
        reply = requests.get(f"http://127.0.0.1:{served.port}/healthz", timeout=10)
    finally:
        for connection in idle:
            connection.close()
        stop(served)

    print(f"embedded server threads: {before} at start, {with_open} with 1,000 idle connections")
    assert reply.status_code == 200
    # werkzeug's threaded server took a thread per connection (310 for 300).
    assert with_open - before < 50, (before, with_open)


def test_the_gevent_hook_for_unreadable_bodies_still_exists() -> None:
    """JsonErrorHandler overrides a private method of gevent's handler; this
    fails by name if gevent renames or drops it."""
    from gevent.pywsgi import WSGIHandler

    assert callable(getattr(WSGIHandler, "_send_error_response_if_possible", None))
    assert "_send_error_response_if_possible" in vars(JsonErrorHandler)
