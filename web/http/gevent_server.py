"""The embedded server: gevent's WSGI server, the serving model of a gunicorn
gevent worker in one process.

A connection costs a greenlet, not an OS thread, so `toolnexus-serve` holds
as many open streams and waiting blocking sends as a gunicorn worker does,
and the app runs on the same request path: gevent, like gunicorn, ends the
request body itself (`wsgi.input_terminated`, chunked or not), which is
what `web.http.wsgi.read_body` reads. The standard library must be patched
(`gevent.monkey.patch_all()`) before anything else is imported, as
`web.http.gunicorn_conf` does for gunicorn; `worker.cli.main` does it for the embedded
role.

What the server answers itself is JSON, as on gunicorn: a request line or
header it cannot read gets the JSON-RPC error of `web.http.errors` with the
server's own status. A connection that sends nothing, or stalls mid-request,
for `idle_timeout` seconds is closed. Every TCP connection has TCP_NODELAY
set (`shared.addresses.no_delay`), so no write of a response waits for the
client's ACK of the one before, and a response's head leaves in the same
write as its first body chunk (gevent writes them apart, each after a
`getsockopt`), so a plain answer costs one send.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from email.utils import formatdate
from functools import lru_cache
from typing import Any, Final
from urllib.parse import urlsplit

from gevent.pool import Pool
from gevent.pywsgi import LoggingLogAdapter, WSGIHandler, WSGIServer

from shared.addresses import no_delay
from web.http.disconnects import SOCKET_KEY
from web.http.errors import framing_error_body, framing_error_response
from web.http.request_headers import PlainHeaders, parse_request_headers
from web.http.wsgi import status_line

log = logging.getLogger(__name__)
# Per process, as web.http.gunicorn_conf's worker_connections: open streams, waiting
# blocking sends and idle keep-alive connections all count against it.
CONNECTIONS: Final = 4096


@lru_cache(maxsize=1)
def _http_date(second: int) -> bytes:
    """The Date header's value for `second`: formatted once a second."""
    return formatdate(second, usegmt=True).encode("ascii")


class JsonErrorHandler(WSGIHandler):  # type: ignore[misc]
    """gevent's handler, answering what it cannot parse with JSON and closing
    idle connections."""

    idle_timeout: float = 5.0
    # Whether the server has an access log; without one (`log=None`) gevent
    # would still format each request's line (its clock read and printed)
    # only to drop it.
    access_log: bool = True
    # The response head gevent asked to send, buffered for the body that follows.
    _head: bytes | None = None
    _buffering_head = False
    # gevent's: the Date header the app gave, None when it gave none.
    provided_date: object

    def handle(self) -> None:
        # Every read and write on this connection: a peer that sends nothing
        # (no request, or a request not sent on) is closed after this long.
        self.socket.settimeout(self.idle_timeout)
        # A response (or an event of a stream) leaves in more than one write;
        # without TCP_NODELAY the last of them waits for the client's delayed
        # ACK of the first. A listener from shared.addresses already gives it
        # to what it accepts; this holds it on any listener, a TCP one of IPv4
        # or IPv6 (a Unix socket has no such option).
        no_delay(self.socket)
        super().handle()

    def MessageClass(self, fp: Any, *args: Any) -> Any:  # gevent reads the headers with this
        return parse_request_headers(fp)

    def _headers(self) -> Iterator[tuple[str, str]]:  # gevent's `HTTP_*` items of the environ
        if isinstance(self.headers, PlainHeaders):
            return self.headers.environ_items()
        return super()._headers()  # type: ignore[no-any-return]

    def finalize_headers(self) -> None:
        if self.provided_date is None:
            # gevent formats the date for every answer; it changes once a second.
            self.response_headers.append((b"Date", _http_date(int(time.time()))))
            self.provided_date = True
        super().finalize_headers()

    def _write_with_headers(self, data: bytes) -> None:
        # gevent sends the head, then (if any) the first body chunk: buffered in
        # `_sendall` below, they leave together.
        self._buffering_head = True
        try:
            super()._write_with_headers(data)
        finally:
            self._buffering_head = False
            head, self._head = self._head, None
            if head is not None:  # no body came after it (or sending it failed)
                super()._sendall(head)

    def _sendall(self, data: bytes) -> None:
        if self._buffering_head and self._head is None:
            self._head = bytes(data)
            return
        if self._head is not None:
            data, self._head = self._head + data, None
        # One `send` carries a whole answer as a rule; gevent's `sendall`
        # asks the socket for its buffer size and the clock before every
        # write, and is kept for what one send leaves over.
        try:
            sent = self.socket.send(data)
        except TimeoutError:  # the peer read nothing for the idle timeout: it is over
            raise
        except OSError:  # gevent's own path fails the same way and records why
            sent = 0
        self.response_length += sent
        if sent < len(data):
            super()._sendall(memoryview(data)[sent:])

    def log_request(self) -> None:
        if self.access_log:
            super().log_request()

    def handle_one_request(self) -> Any:
        result = super().handle_one_request()
        if isinstance(result, tuple):  # (status, the raw error page): a request not read
            status, _ = result
            return status, framing_error_response(int(status))
        return result

    def _send_error_response_if_possible(self, error_code: int) -> None:
        """gevent's hook for a body it could not read (a broken chunk) or an
        app that failed before answering: the same JSON, not an empty page."""
        if self.response_length:
            self.close_connection = True
            return
        body = framing_error_body(error_code)
        headers = [
            ("Content-Type", "application/json"),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
        ]
        try:
            self.start_response(status_line(error_code), headers)
            self.write(body)
        except OSError:
            self.close_connection = True

    def get_environ(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environ()
        environ[SOCKET_KEY] = self.socket
        path = environ.get("PATH_INFO", "")
        if path.startswith(("http://", "https://")):
            # An absolute-form target names the host the request is for, over
            # any Host header (RFC 9112, 3.2.2): the Host check must see it.
            target = urlsplit(path)
            environ["HTTP_HOST"] = target.netloc
            environ["PATH_INFO"] = target.path or "/"
        return environ


def gevent_server(listener: socket.socket, app: Any, *, idle_timeout: float) -> WSGIServer:
    """A server for `app` on an already bound and listening socket."""
    handler = type(
        "Handler", (JsonErrorHandler,), {"idle_timeout": idle_timeout, "access_log": False}
    )
    return WSGIServer(
        listener,
        app,
        handler_class=handler,
        spawn=Pool(CONNECTIONS),
        log=None,  # each request is logged once, by web.http.observe
        # What gevent logs here is a client's broken request: a warning.
        error_log=LoggingLogAdapter(log, logging.WARNING),
    )
