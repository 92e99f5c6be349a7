"""JSON-RPC 2.0 at `POST /`: envelope checks, dialect choice, method calls.

Three dialects share the endpoint. The `A2A-Version` header picks the wire
shapes (none or 0.3: the stored 0.3 shapes; 1.0: the 1.0 shapes); either
version accepts both method spellings. Without a header, the PascalCase
names are the toolnexus dialect, whose SendMessage returns at once unless
asked to block; the A2A dialects block by default, as their specs say.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

from shared.errors import ToolnexusError
from web import params as check
from web.dialects import V03, V10, task_for
from web.errors import (
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    ParseError,
    TaskError,
    VersionNotSupported,
    describe,
    error_body,
)
from web.listing import list_tasks
from web.methods import Tasks

Reply = tuple[dict[str, Any], int]


@dataclass(frozen=True)
class Dialect:
    name: str
    version: str  # which wire shapes: V03 (the stored ones) or V10
    blocking: bool  # SendMessage's default when the request does not say
    wraps_send: bool  # 1.0: SendMessage answers {"task": ...}


TOOLNEXUS: Final = Dialect("toolnexus", V03, blocking=False, wraps_send=False)
A2A_03: Final = Dialect("a2a-0.3", V03, blocking=True, wraps_send=False)
A2A_10: Final = Dialect("a2a-1.0", V10, blocking=True, wraps_send=True)

SEND, GET, CANCEL, LIST = "send", "get", "cancel", "list"
METHODS: Final = {
    "SendMessage": SEND,
    "message/send": SEND,
    "GetTask": GET,
    "tasks/get": GET,
    "CancelTask": CANCEL,
    "tasks/cancel": CANCEL,
    "ListTasks": LIST,
    "tasks/list": LIST,
}
_SLASHED: Final = frozenset(name for name in METHODS if "/" in name)
# Deeper data would be accepted here and then overflow the stack when a
# transition copies the task, leaving it stuck; protobuf's JSON parser
# (A2A 1.0 clients) has the same limit.
MAX_DEPTH: Final = 100


def wire_version(header: str | None) -> str | None:
    """The `A2A-Version` header as V03 or V10 (None: no header). Only
    major.minor counts, so "1.0.0" is 1.0."""
    if header is None or not header.strip():
        return None
    major_minor = ".".join(header.strip().split(".")[:2])
    if major_minor in (V03, V10):
        return major_minor
    raise VersionNotSupported(
        f"A2A-Version {header.strip()[:20]!r} is not supported; use {V10!r} or {V03!r}"
    )


def choose_dialect(version: str | None, method: str) -> Dialect:
    if version == V10:
        return A2A_10
    if version == V03 or method in _SLASHED:
        return A2A_03
    return TOOLNEXUS


def handle(body: bytes, version_header: str | None, tasks: Tasks) -> Reply:
    """One request body in, one JSON-RPC response object and HTTP status out."""
    request_id: object = None
    typed_errors = version_header is not None and version_header.strip().startswith("1.")
    try:
        envelope = _parse(body)
        request_id = _request_id(envelope)
        method = _method(envelope)
        dialect = choose_dialect(wire_version(version_header), method)
        typed_errors = dialect.version == V10
        result = _call(tasks, dialect, METHODS[method], envelope.get("params"))
    except Exception as error:
        wire = describe(error)
        return error_body(wire, request_id, typed_data=typed_errors), wire.http_status
    return {"jsonrpc": "2.0", "id": request_id, "result": result}, 200


def _call(tasks: Tasks, dialect: Dialect, method: str, params: object) -> Any:
    if params is not None and not isinstance(params, Mapping):
        raise InvalidParams("params must be an object", field="params")
    shown = partial(task_for, dialect.version)
    if method == SEND:
        request = check.send_params(params)
        blocking = dialect.blocking if request.blocking is None else request.blocking
        task = shown(tasks.send(request, blocking=blocking))
        return {"task": task} if dialect.wraps_send else task
    if method == GET:
        query = check.task_query(params)
        with _about(query.task_id):
            return shown(tasks.get(query))
    if method == CANCEL:
        task_id = check.task_id(params)
        with _about(task_id):
            return shown(tasks.cancel(task_id))
    page = list_tasks(tasks.store, check.list_query(params))
    return {
        "tasks": [shown(task) for task in page.tasks],
        "nextPageToken": page.next_page_token,
        "pageSize": page.page_size,
        "totalSize": page.total_size,
    }


@contextmanager
def _about(task_id: str) -> Iterator[None]:
    """Errors inside name the task they concern (1.0's ErrorInfo metadata)."""
    try:
        yield
    except TaskError:
        raise
    except ToolnexusError as error:
        raise TaskError(error, task_id) from error


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


def _parse(body: bytes) -> Mapping[str, Any]:
    try:
        envelope = json.loads(body, parse_constant=_reject_constant, parse_float=_finite)
        if not _plainly_storable(body):
            _check_storable(envelope)
    except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError
        raise ParseError(f"Invalid JSON payload: {str(error)[:100]}") from None
    if isinstance(envelope, list):
        raise InvalidRequest("batch requests are not supported")
    if not isinstance(envelope, dict):
        raise InvalidRequest("the request must be a JSON object")
    return envelope


def _request_id(envelope: Mapping[str, Any]) -> object:
    if "id" not in envelope:
        raise InvalidRequest("id is required: notifications are not supported")
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
        raise MethodNotFound(f"method {method[:60]!r} not found; try one of {sorted(METHODS)}")
    return method
