"""gunicorn's gevent worker, answering requests it cannot parse with JSON
and sending a plain response in one write, and its logger, building access
lines only when asked for.

`web.http.gunicorn_conf` names these as `worker_class` and `logger_class`. gunicorn
keeps its own judgement (which status a broken request gets, what is
logged); only the page changes: the HTML it writes is swapped, on its way
to the socket, for the JSON of `web.http.errors`, with the same status.

gunicorn writes a response's head, then its body, each with a `sendall`:
two sends, and (with TCP_NODELAY) two segments for the client to read, for
what fits in one. The worker hands its responses a socket that holds the
head of a response with a length until the body's first write, or until
the request is done (a response without a body).

On SIGTERM the worker stops accepting, as gunicorn's does, and ends its
open event streams at once (`web.http.disconnects.end_streams`) instead of
letting them run on into the graceful timeout: each client resumes on
another front end from the last event id it saw. A connection is closed
once its response is out, not kept for a next request the worker would
wait up to the keep-alive timeout for. Requests that wait within their own
bound (a blocking send, a long-poll GetTask) still get their answer.
"""

from __future__ import annotations

import contextlib
import re
from typing import Any, Final

import gevent
from gunicorn.glogging import Logger
from gunicorn.workers.ggevent import GeventWorker

from web.http.disconnects import end_streams
from web.http.errors import framing_error_response

_STATUS_LINE: Final = re.compile(rb"HTTP/1\.[01] (\d{3}) ")
_CHUNKED: Final = b"\r\ntransfer-encoding: chunked\r\n"


class _JsonErrorPage:
    """The client socket as `handle_error` sees it: the error page written to
    it goes out as JSON; everything else is the socket's own."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock

    def sendall(self, data: bytes) -> None:
        status = _STATUS_LINE.match(data)
        self._sock.sendall(framing_error_response(int(status.group(1)) if status else 400))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class HeadWithBody:
    """The client socket as one response writes to it: the head (its first
    write) leaves with the body's first write. A chunked response's head
    leaves at once (a stream's first chunk may be a while), and so does a
    buffered head before any other use of the socket (gunicorn's `sendfile`
    writes the body through the descriptor)."""

    __slots__ = ("_head", "_sock", "_started")

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._head: bytes | None = None
        self._started = False

    def sendall(self, data: bytes) -> None:
        if not self._started:
            self._started = True
            if _CHUNKED not in data.lower():
                self._head = data
                return
        elif self._head is not None:
            data, self._head = self._head + data, None
        self._sock.sendall(data)

    def flush(self) -> None:
        """Send a head still buffered (the response had no body)."""
        if self._head is not None:
            head, self._head = self._head, None
            self._sock.sendall(head)

    def __getattr__(self, name: str) -> Any:
        self.flush()
        return getattr(self._sock, name)


class JsonErrorWorker(GeventWorker):  # type: ignore[misc]
    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> None:
        writes = HeadWithBody(sock)
        try:
            super().handle_request(listener_name, req, writes, addr)
        except BaseException:  # the connection's end (StopIteration) included
            with contextlib.suppress(OSError):  # a failed write: the first error stands
                writes.flush()
            raise
        writes.flush()
        if not self.alive:
            # Stopping: no next request on this connection (a stream opened
            # before the SIGTERM promised keep-alive), so it is not waited for.
            raise StopIteration

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)  # alive = False: the run loop stops accepting
        # Out of the signal handler, on the worker's loop: ending a stream
        # takes locks the code it interrupted may hold.
        gevent.spawn(end_streams, getattr(self, "wsgi", None))

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        super().handle_error(req, _JsonErrorPage(client), addr, exc)


class AccessOnRequestLogger(Logger):  # type: ignore[misc]
    """gunicorn's logger, with access lines only when `--access-logfile` asks.

    gunicorn counts any `logconfig_dict` as asking for them, so it gathered
    every request's log atoms only to drop the line: the app logs one line
    per request itself (web.http.observe)."""

    def _compute_access_log_enabled(self) -> bool:
        return bool(self.cfg.accesslog)
