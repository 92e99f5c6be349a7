"""The HTTP edge the JSON-RPC and HTTP+JSON endpoints stand on, served
straight on WSGI.

Every A2A call over HTTP comes through here, so it is the hot path: the
request is read from the environ (`web.http.wsgi`), the checks every call
needs (browsers, the caller, the body: `web.http.body`) run, the binding
answers, and the JSON (or the event stream) is written to the server.
Flask's request context, routing, hooks and response objects cost more than
the service's own work for a GetTask; the other routes (the card, health,
metrics) stay Flask's.

The steps are those of the Flask routes: the request id and one log line
with metrics (`web.http.observe`), the Host and Origin screen and CORS headers
(`web.http.browsers`), and a server span when tracing is on. `Edge` holds
what every endpoint needs; `web.jsonrpc.endpoint` and `web.rest.binding`
are the endpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from shared.codec import encode_bytes
from shared.ops.correlation import REQUEST_ID_HEADER
from web.auth.tokens import Authenticator
from web.core.streaming import Stream
from web.core.tasks import Tasks
from web.http.browsers import BrowserPolicy
from web.http.disconnects import HangupMonitor
from web.http.observe import Observed, finish, following
from web.http.wsgi import Headers, HttpRequest, WsgiRequest, status_line

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


def edge_headers(browsers: BrowserPolicy, request: WsgiRequest, observed: Observed) -> Headers:
    """The headers of every answer from the edge: the request id and CORS."""
    cors = browsers.cors_headers(request)
    vary = [("Vary", "Origin")] if browsers.origins else []
    return [(REQUEST_ID_HEADER, observed.request_id), *vary, *cors]


def challenge(status: int) -> Headers:
    """A 401 tells the caller which scheme to use."""
    return [("WWW-Authenticate", 'Bearer realm="toolnexus"')] if status == 401 else []


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
    last = 0
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
            if seq:
                last = seq
                if hangups.ending:
                    # Opened while the process ends its streams: it ends too,
                    # now that the client has an id to resume from.
                    hangup.fire()
        if hangups.ending and hangup.is_set():
            yield _closing(last)


def _closing(last: int) -> bytes:
    """The comment a stream ends with when the process ends it: the client
    resumes on another front end, with `Last-Event-ID`."""
    if not last:
        return b": closing: ask again elsewhere\n\n"
    return f": closing: resume from {last} elsewhere\n\n".encode()
