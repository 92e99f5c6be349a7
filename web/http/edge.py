"""`POST /`, the JSON-RPC endpoint, served straight on WSGI.

Every A2A call comes here, so it is the hot path: the request is read from
the environ (`web.http.wsgi`), the checks every call needs (browsers, the
caller, the body) run, `web.jsonrpc.binding.handle` answers, and the JSON (or the event
stream) is written to the server. Flask's request context, routing, hooks
and response objects cost more than the service's own work for a GetTask;
the other routes (the card, health, metrics) stay Flask's.

The steps are those of the Flask routes: the request id and one log line
with metrics (`web.http.observe`), the Host and Origin screen and CORS headers
(`web.http.browsers`), and a server span when tracing is on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from typing import Any

from werkzeug.exceptions import ClientDisconnected
from werkzeug.wrappers import Response

from shared.codec import encode_bytes
from shared.ops.correlation import REQUEST_ID_HEADER
from shared.ops.tracing import serving
from web.auth.tokens import Authenticator
from web.core.errors import (
    BodyIncomplete,
    BodyTooLarge,
    ContentTypeNotSupported,
    RequestError,
    describe,
    error_body,
)
from web.core.streaming import Stream
from web.core.tasks import Tasks
from web.http.browsers import BrowserPolicy
from web.http.disconnects import HangupMonitor
from web.http.observe import Observed, answered, begin, finish, following
from web.http.wsgi import Headers, HttpRequest, WsgiRequest, answer, read_body, status_line
from web.jsonrpc.binding import handle, typed_errors
from web.rest.routes import is_rest_path

log = logging.getLogger(__name__)

VERSION_HEADER = "A2A-Version"
JSON = "application/json"
WSGIApp = Callable[[dict[str, Any], Any], Iterable[bytes]]
# The extended agent card as a request (its URL) shows it, in a wire version;
# None: none offered.
ExtendedCard = Callable[[HttpRequest, str], Mapping[str, Any]]
_STREAM_HEADERS: Headers = (
    ("Content-Type", "text/event-stream; charset=utf-8"),
    ("Cache-Control", "no-store"),
    ("X-Accel-Buffering", "no"),  # nginx: pass events through at once
)


class Edge:
    """What every endpoint of the edge holds: the methods, the caller check,
    the browser policy, the body limit, the hang-up monitor, the extended card."""

    def __init__(
        self,
        tasks: Tasks,
        authenticator: Authenticator,
        browsers: BrowserPolicy,
        max_body: int,
        hangups: HangupMonitor | None = None,
        extended_card: ExtendedCard | None = None,
    ) -> None:
        self._tasks = tasks
        self._authenticator = authenticator
        self._browsers = browsers
        self._max_body = max_body
        self._hangups = hangups or HangupMonitor()
        self._extended_card = extended_card

    def _headers(self, request: WsgiRequest, observed: Observed) -> Headers:
        return edge_headers(self._browsers, request, observed)

    def _screened(
        self, request: WsgiRequest, observed: Observed, start_response: Any
    ) -> Iterable[bytes] | None:
        """The browser screen: raises a refusal, answers a CORS preflight, or None."""
        preflight = self._browsers.screen(request)
        if preflight is None:
            return None
        preflight.headers[REQUEST_ID_HEADER] = observed.request_id
        finish(observed, preflight.status_code)
        return preflight(request.environ, start_response)


class RpcEndpoint(Edge):
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
            preflight = self._screened(request, observed, start_response)
            if preflight is not None:
                return preflight
            owner = self._authenticator.principal(request.headers.get("Authorization"))
            body = request_body(request, self._max_body)
            require_json(request.mimetype)
        except RequestError as error:
            return self._refused(error, version, request, observed, start_response)
        card = None if self._extended_card is None else partial(self._extended_card, request)
        reply = handle(
            body, version, self._tasks, owner, request.headers.get("Last-Event-ID"), card
        )
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
        headers = [*self._headers(request, observed), *challenge(wire.http_status)]
        finish(observed, wire.http_status)
        return answer(start_response, wire.http_status, body, JSON, headers)

    def _stream(
        self, stream: Stream, request: WsgiRequest, observed: Observed, start_response: Any
    ) -> Iterator[bytes]:
        headers = self._headers(request, observed)
        return open_stream(stream, request, observed, start_response, self._hangups, headers)


def edge_headers(browsers: BrowserPolicy, request: WsgiRequest, observed: Observed) -> Headers:
    """The headers of every answer from the edge: the request id and CORS."""
    cors = browsers.cors_headers(request)
    vary = [("Vary", "Origin")] if browsers.origins else []
    return [(REQUEST_ID_HEADER, observed.request_id), *vary, *cors]


def challenge(status: int) -> Headers:
    """A 401 tells the caller which scheme to use."""
    return [("WWW-Authenticate", 'Bearer realm="toolnexus"')] if status == 401 else []


def request_body(request: WsgiRequest, max_body: int) -> bytes:
    try:
        body = read_body(request.environ, max_body)
    except ClientDisconnected:
        raise BodyIncomplete(
            "request body incomplete: fewer bytes arrived than its Content-Length says"
        ) from None
    if body is None:
        raise BodyTooLarge(f"request body too large: the limit is {max_body} bytes")
    return body


def open_stream(
    stream: Stream,
    request: WsgiRequest,
    observed: Observed,
    start_response: Any,
    hangups: HangupMonitor,
    headers: Headers,
) -> Iterator[bytes]:
    """Start an event stream: its headers now, its events as they come."""
    observed.streaming = True  # recorded when it ends, by `following`
    start_response(status_line(200), [*_STREAM_HEADERS, *headers])
    return _events(stream, following, observed, hangups, request.environ)


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
            if seq:
                head = f"id: {seq}\n".encode()
            elif not stream.wire.enveloped:
                head = b"event: error\n"  # a bare stream's only event without an id
            else:
                head = b""
            yield head + b"data: " + encode_bytes(payload) + b"\n\n"


def front(flask_app: WSGIApp, endpoint: RpcEndpoint, rest: WSGIApp | None = None) -> WSGIApp:
    """The WSGI app: `POST /` to the JSON-RPC endpoint, the HTTP+JSON routes
    to `rest`, everything else to Flask."""

    def dispatch(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/" and environ.get("REQUEST_METHOD") == "POST":
            return endpoint(environ, start_response)
        if rest is not None and is_rest_path(path):
            return rest(environ, start_response)
        return flask_app(environ, start_response)

    return dispatch


def refused(error: RequestError, version: str | None) -> Response:
    """A refusal as a Flask route sends it (the card)."""
    wire = describe(error)
    body = encode_bytes(error_body(wire, None, typed_data=typed_errors(version)))
    return Response(body, status=wire.http_status, mimetype=JSON)


def require_json(
    mimetype: str, refusal: type[ContentTypeNotSupported] = ContentTypeNotSupported
) -> None:
    """Request bodies are JSON. Refusing anything else also keeps browsers
    out: a page can send text/plain or a form without asking, not JSON."""
    if mimetype != JSON and not mimetype.endswith("+json"):
        shown = mimetype or "none"
        raise refusal(f"Content-Type {shown!r} is not supported: send application/json")
