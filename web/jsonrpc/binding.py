"""JSON-RPC 2.0 at `POST /`: envelope checks, dialect choice, method calls.

Three dialects share the endpoint. The `A2A-Version` header picks the wire
shapes (none or 0.3: the stored 0.3 shapes; 1.0: the 1.0 shapes); either
version accepts both method spellings. Without a header, the PascalCase
names are the toolnexus dialect, whose SendMessage returns at once unless
asked to block; the A2A dialects block by default, as their specs say.

A method answers with a result, or with a `Stream` of results (the
streaming methods), which the app sends as Server-Sent Events. Everything
that can be refused is refused before a stream starts, as a plain reply.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import orjson

from shared.codec import may_hold_long_integer
from shared.dialects import V03, V10, message_for, task_for, webhook_for
from shared.errors import ToolnexusError
from shared.mappings import is_mapping
from shared.quoting import shown
from web.core import params as check
from web.core.errors import (
    ExtendedCardNotConfigured,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ParseError,
    TaskError,
    VersionNotSupported,
    describe,
    error_body,
)
from web.core.listing import list_tasks
from web.core.streaming import Stream, Wire, send_stream, subscription
from web.core.tasks import (
    CANCEL,
    CARD,
    GET,
    LIST,
    PUSH_DELETE,
    PUSH_GET,
    PUSH_LIST,
    PUSH_SET,
    SEND,
    STREAM,
    SUBSCRIBE,
    Sent,
    Tasks,
    with_history,
)

Reply = tuple[dict[str, Any], int]


@dataclass(frozen=True)
class Dialect:
    name: str
    version: str  # which wire shapes: V03 (the stored ones) or V10
    blocking: bool  # SendMessage's default when the request does not say
    wraps_send: bool  # 1.0: SendMessage answers {"task": ...} or {"message": ...}
    enveloped: bool = True  # stream events in JSON-RPC responses (HTTP+JSON: bare)


TOOLNEXUS: Final = Dialect("toolnexus", V03, blocking=False, wraps_send=False)
A2A_03: Final = Dialect("a2a-0.3", V03, blocking=True, wraps_send=False)
A2A_10: Final = Dialect("a2a-1.0", V10, blocking=True, wraps_send=True)
HTTP_JSON: Final = Dialect("http+json", V10, blocking=True, wraps_send=True, enveloped=False)


@dataclass(frozen=True)
class Call:
    """One request, checked: who asks, in which dialect, with which request id."""

    tasks: Tasks
    dialect: Dialect
    owner: str
    request_id: object
    last_event_id: str | None  # the Last-Event-ID header: only streams read it
    extended_card: Callable[[str], Mapping[str, Any]] | None = None  # by version; None: none

    @property
    def resume_after(self) -> int | None:
        """The stream event the peer saw last, if it says so."""
        return last_event(self.last_event_id)

    @property
    def wire(self) -> Wire:
        return Wire(
            self.dialect.version,
            self.request_id,
            self.tasks.keepalive,
            enveloped=self.dialect.enveloped,
        )


METHODS: Final = {
    "SendMessage": SEND,
    "message/send": SEND,
    "SendStreamingMessage": STREAM,
    "message/stream": STREAM,
    "GetTask": GET,
    "tasks/get": GET,
    "CancelTask": CANCEL,
    "tasks/cancel": CANCEL,
    "ListTasks": LIST,
    "tasks/list": LIST,
    "SubscribeToTask": SUBSCRIBE,
    "tasks/resubscribe": SUBSCRIBE,
    "CreateTaskPushNotificationConfig": PUSH_SET,
    "GetTaskPushNotificationConfig": PUSH_GET,
    "ListTaskPushNotificationConfigs": PUSH_LIST,
    "DeleteTaskPushNotificationConfig": PUSH_DELETE,
    "tasks/pushNotificationConfig/set": PUSH_SET,
    "tasks/pushNotificationConfig/get": PUSH_GET,
    "tasks/pushNotificationConfig/list": PUSH_LIST,
    "tasks/pushNotificationConfig/delete": PUSH_DELETE,
    "GetExtendedAgentCard": CARD,
    "agent/getAuthenticatedExtendedCard": CARD,
}
_SLASHED: Final = frozenset(name for name in METHODS if "/" in name)
# Deeper data would be accepted here and then overflow the stack when a
# transition copies the task, leaving it stuck; protobuf's JSON parser
# (A2A 1.0 clients) has the same limit.
MAX_DEPTH: Final = 100
_NOTIFICATION: Final = object()  # a request without an id


def wire_version(header: str | None) -> str | None:
    """The `A2A-Version` header as V03 or V10 (None: no header). Only
    major.minor counts, so "1.0.0" is 1.0."""
    if header in (V10, V03):  # as clients send it: nothing to take apart
        return header
    if header is None or not header.strip():
        return None
    major_minor = ".".join(header.strip().split(".")[:2])
    if major_minor in (V03, V10):
        return major_minor
    raise VersionNotSupported(
        f"A2A-Version {shown(header.strip(), 20)} is not supported; use {V10!r} or {V03!r}"
    )


def choose_dialect(version: str | None, method: str) -> Dialect:
    if version == V10:
        return A2A_10
    if version == V03 or method in _SLASHED:
        return A2A_03
    return TOOLNEXUS


def typed_errors(version_header: str | None) -> bool:
    return version_header is not None and version_header.strip().startswith("1.")


def handle(
    body: bytes,
    version_header: str | None,
    tasks: Tasks,
    owner: str,
    last_event_id: str | None = None,
    extended_card: Callable[[str], Mapping[str, Any]] | None = None,
) -> Reply | Stream:
    """One request body in: a JSON-RPC response and its HTTP status, or a stream."""
    request_id: object = None
    typed = typed_errors(version_header)
    try:
        envelope = _parse(body)
        request_id = _request_id(envelope)
        method = _method(envelope)
        dialect = choose_dialect(wire_version(version_header), method)
        typed = dialect.version == V10
        params = envelope.get("params")
        if params is not None and not is_mapping(params):
            raise InvalidParams("params must be an object", field="params")
        kind = METHODS[method]
        parsed = parse(kind, params)
        if request_id is _NOTIFICATION:
            raise InvalidRequest("id is required: notifications are not supported")
        call = Call(tasks, dialect, owner, request_id, last_event_id, extended_card)
        try:
            result = _RUNNERS[kind](call, parsed)
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


def parse(kind: str, params: object) -> Any:
    """A method's params, checked (either spelling of each name), ready to run."""
    return _PARSERS[kind](check.camel_case(params))


def run(kind: str, call: Call, parsed: Any) -> Any:
    """Run a method on params from `parse`: its result, or a Stream."""
    return _RUNNERS[kind](call, parsed)


# --- the methods ---------------------------------------------------------------


def _send(call: Call, request: check.SendParams) -> Any:
    request = _in_version(call, request)
    blocking = call.dialect.blocking if request.blocking is None else request.blocking
    with _about_follow_up(request):
        sent = call.tasks.send(request, call.owner, blocking=blocking)
    return _sent_result(call.dialect, sent, request.history_length)


def _sent_result(dialect: Dialect, sent: Sent, history_length: int | None) -> Any:
    if sent.reply is not None:
        message = message_for(dialect.version, sent.reply)
        return {"message": message} if dialect.wraps_send else message
    task = task_for(dialect.version, with_history(sent.task, history_length))
    return {"task": task} if dialect.wraps_send else task


def _in_version(call: Call, request: check.SendParams) -> check.SendParams:
    if request.webhook is None or request.version == call.dialect.version:
        return request
    return dataclasses.replace(request, version=call.dialect.version)


def _stream(call: Call, request: check.SendParams) -> Stream:
    request = _in_version(call, request)
    with _about_follow_up(request):
        return send_stream(call.tasks, request, call.owner, call.wire, call.resume_after)


def _get(call: Call, query: check.TaskQuery) -> Any:
    with _AboutTask(query.task_id):
        task = call.tasks.get(query, call.owner)
    return task_for(call.dialect.version, with_history(task, query.history_length))


def _cancel(call: Call, task_id: str) -> Any:
    with _AboutTask(task_id):
        return task_for(call.dialect.version, call.tasks.cancel(task_id, call.owner))


def _list(call: Call, query: check.ListQuery) -> Any:
    page = list_tasks(call.tasks.store, query, call.owner)
    shown = partial(task_for, call.dialect.version)
    return {
        "tasks": [shown(task) for task in page.tasks],
        "nextPageToken": page.next_page_token,
        "pageSize": page.page_size,
        "totalSize": page.total_size,
    }


def _subscribe(call: Call, task_id: str) -> Stream:
    with _AboutTask(task_id):
        return subscription(call.tasks, task_id, call.owner, call.wire, call.resume_after)


def _push_set(call: Call, request: check.PushConfigParams) -> Any:
    with _AboutTask(request.task_id):
        config = call.tasks.set_webhook(
            request.task_id, request.webhook, call.owner, call.dialect.version
        )
    return webhook_for(call.dialect.version, config)


def _push_get(call: Call, query: check.PushConfigQuery) -> Any:
    with _AboutTask(query.task_id):
        config = call.tasks.webhook(query.task_id, query.config_id, call.owner)
    return webhook_for(call.dialect.version, config)


def _push_list(call: Call, query: check.PushConfigQuery) -> Any:
    with _AboutTask(query.task_id):
        configs = call.tasks.webhooks(query.task_id, call.owner)
    if call.dialect.version == V03:
        return [webhook_for(V03, config) for config in configs]
    after = [config for config in configs if config["id"] > query.page_token]
    page = after[: query.page_size]
    more = len(after) > len(page)
    return {
        "configs": [webhook_for(V10, config) for config in page],
        "nextPageToken": page[-1]["id"] if more else "",
    }


def _push_delete(call: Call, query: check.PushConfigQuery) -> Any:
    with _AboutTask(query.task_id):
        call.tasks.delete_webhook(query.task_id, query.config_id, call.owner)
    return None if call.dialect.version == V03 else {}


def _card(call: Call, params: object) -> Any:
    if call.extended_card is None:
        raise ExtendedCardNotConfigured("this agent has no extended agent card")
    return call.extended_card(call.dialect.version)


_PARSERS: Final[Mapping[str, Callable[[Any], Any]]] = {
    SEND: check.send_params,
    STREAM: check.send_params,
    GET: check.task_query,
    CANCEL: check.task_id,
    LIST: check.list_query,
    SUBSCRIBE: check.task_id,
    PUSH_SET: check.push_config_params,
    PUSH_GET: check.push_config_query,
    PUSH_LIST: check.push_config_query,
    PUSH_DELETE: check.push_config_query,
    CARD: lambda params: params,
}
_RUNNERS: Final[Mapping[str, Callable[[Call, Any], Any]]] = {
    SEND: _send,
    STREAM: _stream,
    GET: _get,
    CANCEL: _cancel,
    LIST: _list,
    SUBSCRIBE: _subscribe,
    PUSH_SET: _push_set,
    PUSH_GET: _push_get,
    PUSH_LIST: _push_list,
    PUSH_DELETE: _push_delete,
    CARD: _card,
}


class _AboutTask:
    """Errors inside name the task they concern (1.0's ErrorInfo metadata).

    A class, not a `@contextmanager` generator: GetTask enters one on every
    call, and a generator costs several times as much to set up and close."""

    __slots__ = ("_task_id",)

    def __init__(self, task_id: str) -> None:
        self._task_id = task_id

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        if isinstance(error, ToolnexusError) and not isinstance(error, TaskError):
            raise TaskError(error, self._task_id) from error


def _about_follow_up(request: check.SendParams) -> AbstractContextManager[None]:
    """A follow-up's errors name the task it continues, as Get's and Cancel's do."""
    return _AboutTask(request.task_id) if request.task_id is not None else nullcontext()


# --- the envelope ----------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e400: the reply would echo it as Infinity, not JSON
        raise ValueError(f"number {text[:20]} is out of range")
    return number


def _plainly_storable(body: bytes) -> bool:
    """True when the raw bytes already rule out what `_check_storable` looks
    for, so the common small request skips the walk: every nesting level
    needs a bracket, and a lone surrogate needs a `\\u` escape (or bytes
    that are not ASCII)."""
    brackets = body.count(b"[") + body.count(b"{")
    return brackets <= MAX_DEPTH and body.isascii() and b"\\u" not in body


def _check_storable(value: object) -> None:
    """Refuse what `json.loads` lets through but a task cannot hold: nesting
    deeper than MAX_DEPTH, and lone surrogates (from `\\ud800` escapes or
    CESU-8 bytes), which no UTF-8 store can write."""
    pending: list[tuple[list[Any] | dict[str, Any], int]] = [([value], 0)]
    while pending:
        container, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
        items = [*container, *container.values()] if type(container) is dict else container
        for item in items:  # `json.loads` makes exact types: no subclasses to miss
            if type(item) is str:
                if not item.isascii():
                    item.encode("utf-8")  # UnicodeEncodeError is a ValueError
            elif type(item) is dict or type(item) is list:
                pending.append((item, depth + 1))


def _strict_loads(body: bytes) -> Any:
    return json.loads(body, parse_constant=_reject_constant, parse_float=_finite)


def _plain_loads(body: bytes) -> Any:
    """A plainly storable body (ASCII, no escapes, shallow) read by orjson,
    several times faster, when it gives what `_strict_loads` would: no
    integer beyond 64 bits (orjson makes it a float), and no error (the
    standard library words it, with its judgement on NaN and 1e400)."""
    if not may_hold_long_integer(body):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    return _strict_loads(body)


def parse_json(body: bytes) -> Any:
    """A request body as JSON a task can hold; ParseError when it is not."""
    try:
        if _plainly_storable(body):
            return _plain_loads(body)
        value = _strict_loads(body)
        _check_storable(value)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise ParseError(f"Invalid JSON payload: {str(error)[:100]}") from None
    return value


def _parse(body: bytes) -> Mapping[str, Any]:
    envelope = parse_json(body)
    if isinstance(envelope, list):
        raise InvalidRequest("batch requests are not supported")
    if not isinstance(envelope, dict):
        raise InvalidRequest("the request must be a JSON object")
    return envelope


def last_event(header: str | None) -> int | None:
    if header is None or not header.strip():
        return None
    try:
        after = int(header.strip())
    except ValueError:
        after = -1
    if after < 0:
        raise InvalidRequest("Last-Event-ID must be an event number this server sent")
    return after


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
