"""gunicorn's worker (web.http.gunicorn_worker) sends a response with a
length in one write, its head with its body; a chunked one's head at once;
a response without a body, its head alone; and a file sent by `sendfile`
after its head. Driven through `JsonErrorWorker.handle_request` itself, with
gunicorn's own config, request parser and response, on a real TCP
connection in this process; the writes are counted on the server's end.

The worker overrides gunicorn's `handle_request`; the first test fails by
name when gunicorn renames it or changes what it is passed.
"""

from __future__ import annotations

import inspect
import logging
import os
import socket
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from typing import Any

from gunicorn.config import Config
from gunicorn.glogging import Logger
from gunicorn.http import get_parser
from gunicorn.workers.ggevent import GeventWorker

from web.http.gunicorn_worker import JsonErrorWorker

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
BODY = b'{"jsonrpc":"2.0","id":1,"result":{}}'


def test_gunicorn_still_calls_handle_request_as_the_worker_expects() -> None:
    method = getattr(GeventWorker, "handle_request", None)
    assert method is not None, "gunicorn's GeventWorker.handle_request is gone"
    parameters = list(inspect.signature(method).parameters)
    assert parameters == ["self", "listener_name", "req", "sock", "addr"], parameters


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    if path == "/plain":
        start_response(
            "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(BODY)))]
        )
        return [BODY]
    if path == "/empty":
        start_response("204 No Content", [])
        return []
    if path == "/file":
        start_response("200 OK", [("Content-Length", str(len(BODY)))])
        wrapper: Callable[[Any], Iterable[bytes]] = environ["wsgi.file_wrapper"]
        # A descriptor: gunicorn sends it by `sendfile`; the file wrapper closes it.
        file = tempfile.TemporaryFile()  # noqa: SIM115
        file.write(BODY)
        file.seek(0)
        return wrapper(file)
    start_response("200 OK", [("Content-Type", "text/event-stream")])  # no length: chunked
    return iter([b"one", b"two"])


class CountingSocket:
    """The server's end of the connection, recording each write."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.writes: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self.sock.sendall(data)

    def sendfile(self, file: Any, offset: int = 0, count: int | None = None) -> int:
        file.seek(offset)
        data = file.read(count)
        self.writes.append(b"<sendfile>" + data)
        self.sock.sendall(data)
        return len(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.sock, name)


@contextmanager
def connection() -> Iterator[tuple[socket.socket, socket.socket]]:
    with closing(socket.create_server(("127.0.0.1", 0))) as listener:
        client = socket.create_connection(listener.getsockname(), timeout=10)
        server, _ = listener.accept()
        with closing(client), closing(server):
            yield client, server


def worker() -> JsonErrorWorker:
    cfg = Config()
    made = JsonErrorWorker(0, os.getppid(), [], None, 30, cfg, Logger(cfg))
    made.wsgi = app
    return made


def serve(path: str) -> tuple[list[bytes], bytes]:
    """One keep-alive request to `path` through the worker: what its end
    wrote, each write apart, and what the client read."""
    with connection() as (client, server):
        client.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        request = next(get_parser(worker().cfg, server, ("127.0.0.1", 1)))
        counted = CountingSocket(server)
        worker().handle_request("test", request, counted, ("127.0.0.1", 1))
        server.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := client.recv(65536):
            answer += chunk
    return counted.writes, answer


def test_a_response_with_a_length_leaves_in_one_write() -> None:
    writes, answer = serve("/plain")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\n" + BODY)
    assert writes == [answer]


def test_a_response_without_a_body_sends_its_head_once() -> None:
    writes, answer = serve("/empty")
    assert answer.startswith(b"HTTP/1.1 204 No Content\r\n") and answer.endswith(b"\r\n\r\n")
    assert writes == [answer]


def test_a_chunked_response_sends_its_head_before_its_first_chunk() -> None:
    writes, answer = serve("/stream")
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and writes[0].endswith(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in writes[0]
    assert b"".join(writes) == answer and answer.endswith(b"0\r\n\r\n")


def test_a_file_sent_by_sendfile_follows_its_head() -> None:
    logging.getLogger("gunicorn.error").setLevel(logging.ERROR)
    writes, answer = serve("/file")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and body == BODY
    assert writes == [head + b"\r\n\r\n", b"<sendfile>" + BODY]
