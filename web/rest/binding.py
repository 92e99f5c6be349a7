"""The HTTP+JSON binding of A2A 1.0 (spec §11), served straight on WSGI
beside the JSON-RPC endpoint.

A thin binding: the route (`web.rest.routes`) names the method, the path,
the query and the body make the same params a JSON-RPC request carries,
and the handler (`web.core.handler`) checks and runs them, so every binding
shares one implementation of every method, its checks and its errors. What
differs is the wire: results are the bare 1.0 JSON shapes, errors the
google.rpc.Status shape with the HTTP status of `web.core.errors`' table,
and stream events bare StreamResponses, each keeping its `id:` line so a
client can resume with `Last-Event-ID` (the official SDK's REST streams
carry no ids).

The same edge (`web.http.edge`) as `POST /`: Host and Origin screen, CORS,
the bearer token, the body limit, JSON bodies only, the `A2A-Version`
header (this interface speaks 1.0 only: no header means 0.3, which it
refuses, as §3.6.2 says), the request id, one log line and the metrics, a
server span.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from dataclasses import replace
from functools import partial
from typing import Any, Final
from urllib.parse import parse_qs

from shared.codec import encode_bytes
from shared.dialects import V10, V11
from shared.mappings import is_mapping
from shared.ops.tracing import serving
from shared.quoting import shown
from web.core.call import Call, Dialect
from web.core.errors import (
    BodyNotJson,
    InvalidParams,
    InvalidRequest,
    RequestError,
    RouteNotFound,
    VerbNotAllowed,
    VersionNotSupported,
    describe,
    retry_after_header,
    status_body,
)
from web.core.handler import parse, run
from web.core.method_table import GET, LIST, PUSH_LIST, SEND, STREAM, SUBSCRIBE
from web.core.params import camel_name
from web.core.streaming import Stream
from web.core.versions import VERSION_HEADER, wire_version
from web.http.body import JSON, parse_json, request_body, require_json
from web.http.edge import Edge, challenge, open_stream
from web.http.observe import Observed, begin, finish, outcome_of
from web.http.wsgi import WsgiRequest, answer
from web.rest.routes import Route, match

log = logging.getLogger(__name__)

HTTP_JSON: Final = Dialect("http+json", V10, blocking=True, wraps_send=True, enveloped=False)
HTTP_JSON_11: Final = replace(HTTP_JSON, name="http+json-1.1", version=V11)

# Query parameters that are not strings (spec §11.5: decimal and lowercase text).
_INTEGERS: Final = frozenset({"historyLength", "pageSize", "currentGeneration"})
_BOOLEANS: Final = frozenset({"includeArtifacts"})
_DECIMAL: Final = re.compile(r"-?[0-9]{1,18}", re.ASCII)


class RestEndpoint(Edge):
    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        request = WsgiRequest(environ)
        observed = begin(request, "unmatched")
        observed.dialect = HTTP_JSON.name
        route: Route | RequestError
        try:
            route = match(request.method, request.path)
            observed.rpc_method, observed.route = route.name, route.template
        except RequestError as error:
            route = error  # refused once the browser screen has had its say
        try:
            with serving(request.method, observed.route, request.headers.items()):
                return self._serve(request, route, observed, start_response)
        except Exception as error:
            log.error("unhandled error on %s %s", request.method, request.path, exc_info=error)
            return self._refused(error, request, observed, start_response)
        finally:
            observed.binding.release()

    def _serve(
        self,
        request: WsgiRequest,
        route: Route | RequestError,
        observed: Observed,
        start_response: Any,
    ) -> Iterable[bytes]:
        try:
            preflight = self._screened(request, observed, start_response)
            if preflight is not None:
                return preflight
            if isinstance(route, RequestError):
                raise route
            if route.tenant is not None:
                raise RouteNotFound(
                    f"tenant {shown(route.tenant, 80)} is not served here: this agent's card"
                    f" declares no tenant, so call {route.template} without a prefix"
                )
            owner = self._authenticator.principal(request.headers.get("Authorization"))
            params = self._params(request, route)
            dialect = _dialect(request.headers.get(VERSION_HEADER) or request.arg(VERSION_HEADER))
            parsed = parse(route.kind, params)
            card = None if self._extended_card is None else partial(self._extended_card, request)
            call = Call(
                self._tasks, dialect, owner, None, request.headers.get("Last-Event-ID"), card
            )
            result = run(route.kind, call, parsed)
        except Exception as error:
            return self._refused(error, request, observed, start_response)
        headers = self._headers(request, observed)
        if isinstance(result, Stream):
            return open_stream(result, request, observed, start_response, self._hangups, headers)
        observed.outcome, observed.task_id = outcome_of({"result": result})
        finish(observed, 200)
        return answer(start_response, 200, encode_bytes(result), JSON, headers)

    def _params(self, request: WsgiRequest, route: Route) -> dict[str, Any]:
        """The params a JSON-RPC call of this method would carry."""
        body: dict[str, Any] = {}
        if request.method == "POST":
            body = self._body(request, required=route.kind in (SEND, STREAM))
        elif route.kind in (GET, LIST, PUSH_LIST):
            body = _query(request.environ.get("QUERY_STRING") or "")
        if route.kind == SUBSCRIBE:
            body = {}  # the task is the path's: nothing else to say
        # The path names the task: it wins over a body that names another.
        return {**body, **route.path_params}

    def _body(self, request: WsgiRequest, *, required: bool) -> dict[str, Any]:
        raw = request_body(request, self._max_body)
        if not raw.strip():
            if required:
                raise InvalidRequest("a request body is required: a JSON SendMessageRequest")
            return {}  # cancel and subscribe need no body
        require_json(request.mimetype, BodyNotJson)
        value = parse_json(raw)
        if not is_mapping(value):
            raise InvalidRequest("the request body must be a JSON object")
        return dict(value)

    def _refused(
        self, error: BaseException, request: WsgiRequest, observed: Observed, start_response: Any
    ) -> list[bytes]:
        wire = describe(error)
        observed.outcome = str(wire.code)
        headers = [*self._headers(request, observed), *challenge(wire.rest_status)]
        if isinstance(error, VerbNotAllowed):
            headers.append(("Allow", ", ".join(error.allowed)))
        if wire.retry_after is not None:
            headers.append(("Retry-After", retry_after_header(wire.retry_after)))
        finish(observed, wire.rest_status)
        body = encode_bytes(status_body(wire))
        return answer(start_response, wire.rest_status, body, JSON, headers)


def _dialect(header: str | None) -> Dialect:
    version = wire_version(header)
    if version == V11:
        return HTTP_JSON_11
    if version != V10:
        raise VersionNotSupported(
            "this HTTP+JSON interface speaks A2A 1.0: send 'A2A-Version: 1.0'"
            " (a request without it is A2A 0.3, which this interface does not serve)"
        )
    return HTTP_JSON


def _query(query: str) -> dict[str, Any]:
    """Query parameters as params: the first value of each, typed by name."""
    params: dict[str, Any] = {}
    try:
        pairs = parse_qs(query, keep_blank_values=True, strict_parsing=False, errors="strict")
    except UnicodeDecodeError:
        raise InvalidParams("the query string is not UTF-8", field="query") from None
    for name, values in pairs.items():
        if name == VERSION_HEADER:
            continue
        camel = name if "_" not in name else camel_name(name)
        params.setdefault(camel, _typed(camel, values[0]))
    return params


def _typed(name: str, value: str) -> object:
    if name in _INTEGERS:
        text = value.strip()
        if _DECIMAL.fullmatch(text) is None:
            raise InvalidParams(f"{name} must be an integer, got {shown(value, 40)}", field=name)
        return int(text)
    if name in _BOOLEANS:
        if value.lower() not in ("true", "false"):
            raise InvalidParams(f"{name} must be true or false, got {shown(value, 40)}", field=name)
        return value.lower() == "true"
    return value
