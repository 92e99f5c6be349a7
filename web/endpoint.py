"""`POST /`, the JSON-RPC endpoint, served straight on WSGI.

Every A2A call comes here, so it is the hot path: the request is read from
the environ (`web.wsgi`), the checks every call needs (browsers, the
caller, the body) run, `web.rpc.handle` answers, and the JSON (or the event
stream) is written to the server. Flask's request context, routing, hooks
and response objects cost more than the service's own work for a GetTask;
the other routes (the card, health, metrics) stay Flask's.

The steps are those of the Flask routes: the request id and one log line
with metrics (`web.observe`), the Host and Origin screen and CORS headers
(`web.browsers`), and a server span when tracing is on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from werkzeug.exceptions import ClientDisconnected
from werkzeug.wrappers import Response

from shared.codec import encode_bytes
from shared.correlation import REQUEST_ID_HEADER
from shared.tracing import serving
from web.auth import Authenticator
from web.browsers import BrowserPolicy
from web.errors import (
    BodyIncomplete,
    BodyTooLarge,
    ContentTypeNotSupported,
    RequestError,
    describe,
    error_body,
)
from web.hangups import HangupMonitor
from web.methods import Tasks
from web.observe import Observed, answered, begin, finish, following
from web.rpc import handle, typed_errors
from web.streaming import Stream
from web.wsgi import Headers, WsgiRequest, answer, read_body, status_line

log = logging.getLogger(__name__)

VERSION_HEADER = "A2A-Version"
JSON = "application/json"
WSGIApp = Callable[[dict[str, Any], Any], Iterable[bytes]]
_STREAM_HEADERS: Headers = (
    ("Content-Type", "text/event-stream; charset=utf-8"),
    ("Cache-Control", "no-store"),
    ("X-Accel-Buffering", "no"),  # nginx: pass events through at once
)


class RpcEndpoint:
    def __init__(
        self,
        tasks: Tasks,
        authenticator: Authenticator,
        browsers: BrowserPolicy,
        max_body: int,
    ) -> None:
        self._tasks = tasks
        self._authenticator = authenticator
        self._browsers = browsers
        self._max_body = max_body
        self._hangups = HangupMonitor()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = WsgiRequest(environ)
        observed = begin(request, "/")
        try:
            with serving("POST", "/", request.headers.items()):
                return self._serve(request, observed, start_response)
        except Exception as error:
            log.error("unhandled error on POST /", exc_info=error)
            body = encode_bytes(error_body(describe(error), None, typed_data=False))
            finish(observed, 500)
            return answer(start_response, 500, body, JSON, self._headers(request, observed))
        finally:
            observed.binding.release()

    def _serve(
        self, request: WsgiRequest, observed: Observed, start_response: Any
    ) -> Iterable[bytes]:
        version = request.headers.get(VERSION_HEADER) or request.arg(VERSION_HEADER)
        try:
            preflight = self._browsers.screen(request)
            if preflight is not None:
                preflight.headers[REQUEST_ID_HEADER] = observed.request_id
                finish(observed, preflight.status_code)
                return preflight(request.environ, start_response)
            owner = self._authenticator.principal(request.headers.get("Authorization"))
            body = self._body(request)
            _require_json(request.mimetype)
        except RequestError as error:
            return self._refused(error, version, request, observed, start_response)
        reply = handle(body, version, self._tasks, owner, request.headers.get("Last-Event-ID"))
        answered(observed, body, version, reply)
        if isinstance(reply, Stream):
            return self._stream(reply, request, observed, start_response)
        payload, status = reply
        finish(observed, status)
        return answer(
            start_response, status, encode_bytes(payload), JSON, self._headers(request, observed)
        )

    def _refused(
        self,
        error: RequestError,
        version: str | None,
        request: WsgiRequest,
        observed: Observed,
        start_response: Any,
    ) -> list[bytes]:
        wire = describe(error)
        observed.outcome = str(wire.code)
        body = encode_bytes(error_body(wire, None, typed_data=typed_errors(version)))
        headers = list(self._headers(request, observed))
        if wire.http_status == 401:
            headers.append(("WWW-Authenticate", 'Bearer realm="toolnexus"'))
        finish(observed, wire.http_status)
        return answer(start_response, wire.http_status, body, JSON, headers)

    def _stream(
        self, stream: Stream, request: WsgiRequest, observed: Observed, start_response: Any
    ) -> Iterator[bytes]:
        observed.streaming = True  # recorded when it ends, by `following`
        start_response(status_line(200), [*_STREAM_HEADERS, *self._headers(request, observed)])
        return _events(stream, following, observed, self._hangups, request.environ)

    def _headers(self, request: WsgiRequest, observed: Observed) -> Headers:
        cors = self._browsers.cors_headers(request)
        vary = [("Vary", "Origin")] if self._browsers.origins else []
        return [(REQUEST_ID_HEADER, observed.request_id), *vary, *cors]

    def _body(self, request: WsgiRequest) -> bytes:
        try:
            body = read_body(request.environ, self._max_body)
        except ClientDisconnected:
            raise BodyIncomplete(
                "request body incomplete: fewer bytes arrived than its Content-Length says"
            ) from None
        if body is None:
            raise BodyTooLarge(f"request body too large: the limit is {self._max_body} bytes")
        return body


def _events(
    stream: Stream,
    observing: Callable[[Observed, Iterator[Any]], Iterator[Any]],
    observed: Observed,
    hangups: HangupMonitor,
    environ: dict[str, Any],
) -> Iterator[bytes]:
    yield b": stream open\n\n"  # the headers go out now, not with the first event
    with hangups.watching(environ) as hangup:
        for item in observing(observed, stream.open(hangup)):
            if item is None:
                yield b": keepalive\n\n"
                continue
            seq, payload = item
            head = f"id: {seq}\n".encode() if seq else b""
            yield head + b"data: " + encode_bytes(payload) + b"\n\n"


def front(flask_app: WSGIApp, endpoint: RpcEndpoint) -> WSGIApp:
    """The WSGI app: `POST /` to the endpoint, everything else to Flask."""

    def dispatch(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "POST" and environ.get("PATH_INFO") in ("/", ""):
            return endpoint(environ, start_response)
        return flask_app(environ, start_response)

    return dispatch


def refused(error: RequestError, version: str | None) -> Response:
    """A refusal as a Flask route sends it (the card)."""
    wire = describe(error)
    body = encode_bytes(error_body(wire, None, typed_data=typed_errors(version)))
    return Response(body, status=wire.http_status, mimetype=JSON)


def _require_json(mimetype: str) -> None:
    """JSON-RPC bodies are JSON. Refusing anything else also keeps browsers
    out: a page can send text/plain or a form without asking, not JSON."""
    if mimetype != JSON and not mimetype.endswith("+json"):
        shown = mimetype or "none"
        raise ContentTypeNotSupported(
            f"Content-Type {shown!r} is not supported: send application/json"
        )
