"""A request read straight from the WSGI environ, and answers written
straight to the server: what the JSON-RPC and HTTP+JSON endpoints need of
HTTP, without building request and response objects on every call.

`HttpRequest` is what `web.http.browsers` and `web.http.observe` read of a request;
werkzeug's (and Flask's) `Request` has the same attributes, so the Flask
routes pass theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import cache
from http import HTTPStatus
from typing import Any, Final, Protocol
from urllib.parse import parse_qs

from werkzeug.exceptions import ClientDisconnected, RequestEntityTooLarge
from werkzeug.wsgi import get_content_length, get_input_stream

Headers = Sequence[tuple[str, str]]
WSGIApp = Callable[[dict[str, Any], Any], Iterable[bytes]]
_SPECIAL = {"CONTENT_TYPE": "CONTENT_TYPE", "CONTENT_LENGTH": "CONTENT_LENGTH"}
_CHUNK: Final = 64 * 1024


class HttpRequest(Protocol):
    @property
    def method(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def scheme(self) -> str: ...

    @property
    def environ(self) -> Any: ...

    @property
    def headers(self) -> Any: ...


@cache
def _environ_key(header: str) -> str:
    """Where the environ keeps a header: asked of a handful of names (the
    code's own constants), a few times per request."""
    name = header.upper().replace("-", "_")
    return _SPECIAL.get(name) or "HTTP_" + name


class EnvironHeaders:
    __slots__ = ("_environ",)

    def __init__(self, environ: dict[str, Any]) -> None:
        self._environ = environ

    def get(self, key: str, default: Any = None) -> Any:
        value = self._environ.get(_environ_key(key))
        return default if value is None else value

    def items(self) -> Iterable[tuple[str, str]]:
        for key, value in self._environ.items():
            if key.startswith("HTTP_"):
                yield key[5:].replace("_", "-").title(), value


class WsgiRequest:
    """One request, read from its environ as it is asked for."""

    __slots__ = ("environ", "headers")

    def __init__(self, environ: dict[str, Any]) -> None:
        self.environ = environ
        self.headers = EnvironHeaders(environ)

    @property
    def method(self) -> str:
        return str(self.environ.get("REQUEST_METHOD", "GET")).upper()

    @property
    def path(self) -> str:
        return str(self.environ.get("PATH_INFO") or "/")

    @property
    def scheme(self) -> str:
        return str(self.environ.get("wsgi.url_scheme", "http"))

    @property
    def mimetype(self) -> str:
        return str(self.environ.get("CONTENT_TYPE", "")).split(";", 1)[0].strip().lower()

    def arg(self, name: str) -> str | None:
        query = self.environ.get("QUERY_STRING")
        if not query:
            return None
        values = parse_qs(query).get(name)
        return values[0] if values else None


@cache
def status_line(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


def answer(
    start_response: Any, status: int, body: bytes, content_type: str, headers: Headers = ()
) -> list[bytes]:
    """Send a whole body: status, headers, the bytes."""
    start_response(
        status_line(status),
        [("Content-Type", content_type), ("Content-Length", str(len(body))), *headers],
    )
    return [body]


def read_body(environ: dict[str, Any], limit: int) -> bytes | None:
    """The request body, or None when it is longer than `limit` bytes;
    werkzeug's ClientDisconnected when fewer bytes arrive than promised.

    Read up to one byte over the limit: a chunked body is cut at the
    stream's limit without a word, so the extra byte is what tells it was
    too large. A server that ends the input stream itself (gunicorn sets
    `wsgi.input_terminated`) is read here, chunk by chunk, as werkzeug's
    `get_input_stream` would read it, without its stream wrappers: they
    cost a GetTask more than its own checks. Any other server's stream
    goes through `get_input_stream`.
    """
    over = limit + 1
    if "wsgi.input_terminated" not in environ:
        try:
            body = get_input_stream(environ, max_content_length=over).read()
        except RequestEntityTooLarge:
            return None
    else:
        declared = get_content_length(environ)
        if declared is not None and declared > over:
            return None
        body = _read_until_end(environ["wsgi.input"], over)
    return None if len(body) > limit else bytes(body)


def _read_until_end(stream: Any, most: int) -> bytes:
    """A terminated stream's bytes, until it ends or `most` have come."""
    body = bytearray()
    while len(body) < most:
        try:
            chunk = stream.read(min(_CHUNK, most - len(body)))
        except (OSError, ValueError):  # a connection that broke mid-body
            raise ClientDisconnected() from None
        if not chunk:
            break
        body += chunk
    return bytes(body)
