"""HTTP framing errors as JSON, on both servers.

A request the HTTP server itself cannot read (a garbage request line, a
header with a NUL, a bad Content-Length, a 70 KB header, a thousand
headers) never reaches the app: the server answers it, by default with an
HTML page. Here that page is replaced by a JSON-RPC error with a null id
and the server's own status (400, 414, 431, ...), so a client always gets
JSON. The message is fixed per status: the unreadable input is never
echoed back.

- gevent's WSGI server (the embedded server): `web.http.gevent_server.JsonErrorHandler`.
- gunicorn: `web.http.gunicorn_worker.JsonErrorWorker`, named by `web.http.gunicorn_conf`.
"""

from __future__ import annotations

import http
from typing import Final

from shared.codec import encode
from web.core.errors import WireError, error_body

_MESSAGES: Final = {
    400: "bad HTTP request: the request line or a header could not be read",
    403: "forbidden",
    404: "not found",
    408: "request timeout",
    411: "Content-Length required",
    413: "request too large",
    414: "request line too long",
    417: "expectation failed",
    431: "request header fields too large, or too many of them",
    501: "not implemented: unsupported method or transfer coding",
    505: "HTTP version not supported",
}


def framing_error_body(status: int) -> bytes:
    """The JSON-RPC error a client gets for a request the server could not read."""
    if status >= 500 and status not in _MESSAGES:
        wire = WireError(-32603, "internal error", "INTERNAL_ERROR")
    else:
        message = _MESSAGES.get(status) or _reason(status).lower() or "bad HTTP request"
        wire = WireError(-32600, message, "INVALID_REQUEST")
    return encode(error_body(wire, None, typed_data=False)).encode()


def framing_error_response(status: int) -> bytes:
    """A whole HTTP/1.1 response carrying `framing_error_body`; the
    connection closes after it (the rest of the stream cannot be trusted)."""
    body = framing_error_body(status)
    head = (
        f"HTTP/1.1 {status} {_reason(status) or 'Error'}\r\n"
        "Connection: close\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        "\r\n"
    )
    return head.encode("ascii") + body


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""
