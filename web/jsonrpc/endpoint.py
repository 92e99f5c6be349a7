"""`POST /`, the JSON-RPC endpoint, on the HTTP edge (`web.http.edge`).

The edge's checks (browsers, the caller, the body limit, a JSON
Content-Type) run first, `web.jsonrpc.binding.handle` answers, and the JSON
response, or the event stream, is written straight to the server. What it
answered is recorded for the request's log line and metrics (`answered`):
the method, the dialect, the outcome and the task.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from functools import partial
from typing import Any, Final

from shared.codec import encode_bytes
from shared.mappings import is_mapping
from shared.ops.tracing import serving
from web.core.errors import RequestError, describe, error_body
from web.core.streaming import Stream
from web.core.versions import VERSION_HEADER, typed_errors, wire_version
from web.http.body import JSON, request_body, require_json
from web.http.edge import Edge, challenge, open_stream
from web.http.observe import Observed, begin, finish, outcome_of
from web.http.wsgi import WsgiRequest, answer
from web.jsonrpc.binding import METHODS, choose_dialect, handle

log = logging.getLogger(__name__)

# The method name sits near the start of any envelope a client writes; only
# that much is searched, so a large body costs nothing extra to log.
_METHOD_FIELD: Final = re.compile(rb'"method"\s*:\s*"([A-Za-z/]{1,64})"')
_METHOD_SEARCH_LIMIT: Final = 4096


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


def answered(observed: Observed, body: bytes, version_header: str | None, answer: object) -> None:
    """What the JSON-RPC endpoint answered (a `(payload, status)` pair, or a stream)."""
    observed.rpc_method = rpc_method(body)
    try:
        observed.dialect = choose_dialect(wire_version(version_header), observed.rpc_method).name
    except RequestError:
        observed.dialect = "unsupported"
    if isinstance(answer, tuple) and is_mapping(answer[0]):
        observed.outcome, observed.task_id = outcome_of(answer[0])


def rpc_method(body: bytes) -> str:
    """The JSON-RPC method named in `body`, if it is one this service knows."""
    found = _METHOD_FIELD.search(body, 0, _METHOD_SEARCH_LIMIT)
    name = found.group(1).decode() if found else ""
    return name if name in METHODS else "unknown"
