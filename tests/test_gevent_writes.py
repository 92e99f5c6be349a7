"""The embedded server sends a plain response in one write: its head and
its body together (gevent's own handler sends them apart), in one `send`.
Counted on the server's end of a real connection, in this process: every
`send` of a socket whose local port is the server's (gevent's `sendall`
writes through `send` too).

The handler reaches into two private methods of gevent's `WSGIHandler`
(`_write_with_headers`, `_sendall`) and its `finalize_headers` and
`provided_date` (to date an answer with a date formatted once a second);
the first two tests fail by name when gevent renames or drops them.
"""

from __future__ import annotations

import inspect
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from email.utils import parsedate_to_datetime
from typing import Any

import gevent.socket
import pytest
from gevent.pywsgi import WSGIHandler

from web.http.gevent_server import gevent_server

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
# More than a loopback socket's send buffer takes at once.
BIG = 8 * 1024 * 1024


def test_gevent_still_has_the_methods_the_handler_overrides() -> None:
    for name, parameters in (
        ("_write_with_headers", ["self", "data"]),
        ("_sendall", ["self", "data"]),
        ("finalize_headers", ["self"]),
    ):
        method = getattr(WSGIHandler, name, None)
        assert method is not None, f"gevent.pywsgi.WSGIHandler.{name} is gone"
        assert list(inspect.signature(method).parameters) == parameters, name


def app(environ: dict[str, Any], start_response: StartResponse) -> Any:
    path = environ["PATH_INFO"]
    if path == "/plain":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
        return [b"hello"]
    if path == "/big":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(BIG))])
        return [b"x" * BIG]
    if path == "/dated":
        start_response("200 OK", [("Date", "Tue, 01 Dec 2026 00:00:00 GMT"), ("X-Path", "/dated")])
        return [b""]
    if path == "/empty":
        start_response("204 No Content", [])
        return []
    # Streamed: no length, so chunked, three chunks.
    start_response("200 OK", [("Content-Type", "text/plain")])
    return iter([b"one", b"two", b"three"])


@contextmanager
def counting_sends(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, list[bytes]]]:
    """A server on a free port, and what its end of each connection sent,
    one item per `send` call."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    sent: list[bytes] = []
    original = gevent.socket.socket.send

    def send(self: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
        count = original(self, data, *args, **kwargs)
        if self.getsockname()[1] == port:
            sent.append(bytes(data)[:count])
        return count

    monkeypatch.setattr(gevent.socket.socket, "send", send)
    server = gevent_server(listener, app, idle_timeout=30)
    server.start()
    try:
        yield port, sent
    finally:
        server.stop(timeout=1)
        listener.close()


def ask(port: int, path: str) -> bytes:
    """One request on a connection of its own; the whole response."""
    connection = gevent.socket.create_connection(("127.0.0.1", port), timeout=10)
    with connection:
        connection.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        answer = bytearray()
        while chunk := connection.recv(1 << 20):
            answer += chunk
    return bytes(answer)


def test_every_answer_is_dated_now_and_once(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "provided_date" in vars(WSGIHandler), "gevent's WSGIHandler.provided_date is gone"
    with counting_sends(monkeypatch) as (port, _):
        before = time.time()
        answers = [ask(port, path) for path in ("/plain", "/empty", "/stream", "/dated")]
        after = time.time()
    for answer in answers:
        head = answer.partition(b"\r\n\r\n")[0].decode()
        dates = [line for line in head.split("\r\n") if line.lower().startswith("date:")]
        assert len(dates) == 1, head
        if "/dated" not in head:
            moment = parsedate_to_datetime(dates[0].split(":", 1)[1].strip()).timestamp()
            assert int(before) <= moment <= after, head
    assert b"Date: Tue, 01 Dec 2026 00:00:00 GMT" in answers[-1]  # the app's own, kept


def test_a_plain_response_leaves_in_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    with counting_sends(monkeypatch) as (port, sent):
        answer = ask(port, "/plain")
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nhello")
    assert sent == [answer], sent


def test_a_response_without_a_body_sends_its_head_once(monkeypatch: pytest.MonkeyPatch) -> None:
    with counting_sends(monkeypatch) as (port, sent):
        answer = ask(port, "/empty")
    assert answer.startswith(b"HTTP/1.1 204 No Content\r\n") and answer.endswith(b"\r\n\r\n")
    assert sent == [answer], sent


def test_a_streamed_response_sends_its_head_with_the_first_chunk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with counting_sends(monkeypatch) as (port, sent):
        answer = ask(port, "/stream")
    assert b"".join(sent) == answer
    head, first, *rest = [*sent[0].split(b"\r\n\r\n", 1), *sent[1:]]
    assert head.startswith(b"HTTP/1.1 200 OK") and b"Transfer-Encoding: chunked" in head
    assert first == b"3\r\none\r\n"
    assert rest == [b"3\r\ntwo\r\n", b"5\r\nthree\r\n", b"0\r\n\r\n"]


def test_what_one_send_leaves_over_follows_it(monkeypatch: pytest.MonkeyPatch) -> None:
    with counting_sends(monkeypatch) as (port, sent):
        answer = ask(port, "/big")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and body == b"x" * BIG
    assert len(sent) > 1 and b"".join(sent) == answer


def test_a_peer_that_stops_reading_is_given_up_after_one_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A send that times out (the peer read nothing for the idle timeout)
    ends the connection: gevent's `sendall` does not wait a second time."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    retried: list[int] = []
    send, sendall = gevent.socket.socket.send, gevent.socket.socket.sendall

    def stalled(self: Any, data: Any, *args: Any, **kwargs: Any) -> Any:
        if self.getsockname()[1] == port:
            raise TimeoutError("timed out")
        return send(self, data, *args, **kwargs)

    def counted(self: Any, data: Any, flags: int = 0) -> Any:
        if self.getsockname()[1] == port:
            retried.append(len(data))
        return sendall(self, data, flags)

    monkeypatch.setattr(gevent.socket.socket, "send", stalled)
    monkeypatch.setattr(gevent.socket.socket, "sendall", counted)
    server = gevent_server(listener, app, idle_timeout=30)
    server.start()
    try:
        answer = ask(port, "/plain")
    finally:
        server.stop(timeout=1)
        listener.close()
    assert answer == b"" and retried == []
