"""JSON-RPC 2.0 at `POST /`: envelope checks, dialect choice, method calls.

Three dialects share the endpoint. The `A2A-Version` header picks the wire
shapes (none or 0.3: the stored 0.3 shapes; 1.0: the 1.0 shapes); either
version accepts both method spellings (`web.core.method_table`). Without a
header, the PascalCase names are the toolnexus dialect, whose SendMessage
returns at once unless asked to block; the A2A dialects block by default,
as their specs say.

The envelope named, its params are checked and its method run by the
handler (`web.core.handler`). A method answers with a result, or with a
`Stream` of results (the streaming methods), which the endpoint
(`web.jsonrpc.endpoint`) sends as Server-Sent Events. Everything that can
be refused is refused before a stream starts, as a plain reply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from shared.dialects import V03, V10, V11
from shared.mappings import is_mapping
from shared.quoting import shown
from web.core.call import Call, Dialect, ExtendedCard
from web.core.errors import InvalidParams, InvalidRequest, MethodNotFound, describe, error_body
from web.core.handler import parse, run
from web.core.method_table import METHOD_TABLE, STREAM, SUBSCRIBE
from web.core.streaming import Stream
from web.core.tasks import Tasks
from web.core.versions import typed_errors, wire_version
from web.http.body import parse_json

Reply = tuple[dict[str, Any], int]

TOOLNEXUS: Final = Dialect("toolnexus", V03, blocking=False, wraps_send=False)
A2A_03: Final = Dialect("a2a-0.3", V03, blocking=True, wraps_send=False)
A2A_10: Final = Dialect("a2a-1.0", V10, blocking=True, wraps_send=True)
A2A_11: Final = Dialect("a2a-1.1", V11, blocking=True, wraps_send=True)

# Every JSON-RPC method name, in both spellings, to its method's kind.
METHODS: Final[Mapping[str, str]] = {
    name: method.kind for method in METHOD_TABLE for name in method.jsonrpc_names
}
_SLASHED: Final = frozenset(name for name in METHODS if "/" in name)
_NOTIFICATION: Final = object()  # a request without an id


def choose_dialect(version: str | None, method: str) -> Dialect:
    if version == V10:
        return A2A_10
    if version == V11:
        return A2A_11
    if version == V03 or method in _SLASHED:
        return A2A_03
    return TOOLNEXUS


def handle(
    body: bytes,
    version_header: str | None,
    tasks: Tasks,
    owner: str,
    last_event_id: str | None = None,
    extended_card: ExtendedCard | None = None,
) -> Reply | Stream:
    """One request body in: a JSON-RPC response and its HTTP status, or a stream."""
    request_id: object = None
    typed = typed_errors(version_header)
    try:
        envelope = _parse(body)
        request_id = _request_id(envelope)
        method = _method(envelope)
        dialect = choose_dialect(wire_version(version_header), method)
        typed = dialect.version != V03
        params = envelope.get("params")
        if params is not None and not is_mapping(params):
            raise InvalidParams("params must be an object", field="params")
        kind = METHODS[method]
        parsed = parse(kind, params)
        if request_id is _NOTIFICATION:
            raise InvalidRequest("id is required: notifications are not supported")
        call = Call(tasks, dialect, owner, request_id, last_event_id, extended_card)
        try:
            result = run(kind, call, parsed)
        except Exception as error:
            if dialect is not A2A_03 or kind not in (STREAM, SUBSCRIBE):
                raise
            result = _refused_in_stream(call, error)
    except Exception as error:
        wire = describe(error)
        shown_id = None if request_id is _NOTIFICATION else request_id
        return error_body(wire, shown_id, typed_data=typed), wire.http_status
    if isinstance(result, Stream):
        return result
    return {"jsonrpc": "2.0", "id": request_id, "result": result}, 200


def _refused_in_stream(call: Call, error: Exception) -> Stream:
    """A 0.3 streaming method the method itself refuses (an unknown task, a
    finished one) is answered as the stream of that one error: spec 0.3
    §3.3.1 has the server answer `message/stream` and `tasks/resubscribe`
    with "HTTP 200 OK status and a Content-Type header of text/event-stream",
    each event a SendStreamingMessageResponse (which may be a
    JSONRPCErrorResponse), and the 0.3 SDK's client reads nothing else. A
    malformed request is still a plain JSON error, as with the 0.3 SDK; 1.0
    clients read both and get the plain one."""
    return Stream(call.wire, "", lambda wire: iter([wire.error(error, "")]))


# --- the envelope ----------------------------------------------------------------


def _parse(body: bytes) -> Mapping[str, Any]:
    envelope = parse_json(body)
    if isinstance(envelope, list):
        raise InvalidRequest("batch requests are not supported")
    if not isinstance(envelope, dict):
        raise InvalidRequest("the request must be a JSON object")
    return envelope


def _request_id(envelope: Mapping[str, Any]) -> object:
    if "id" not in envelope:
        return _NOTIFICATION
    request_id = envelope["id"]
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | float | None):
        raise InvalidRequest("id must be a string, a number or null")
    return request_id


def _method(envelope: Mapping[str, Any]) -> str:
    if envelope.get("jsonrpc") != "2.0":
        raise InvalidRequest('jsonrpc must be exactly "2.0"')
    method = envelope.get("method")
    if not isinstance(method, str):
        raise InvalidRequest("method must be a string")
    if method not in METHODS:
        raise MethodNotFound(f"method {shown(method)} not found; try one of {sorted(METHODS)}")
    return method
