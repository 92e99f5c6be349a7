"""A request body at the HTTP edge: read within the body limit, JSON by its
Content-Type, and parsed into JSON a task can hold (`parse_json`), for the
JSON-RPC envelope and the HTTP+JSON bodies alike."""

from __future__ import annotations

import json
import math
from typing import Any, Final

import orjson
from werkzeug.exceptions import ClientDisconnected

from shared.codec import may_hold_long_integer
from web.core.errors import BodyIncomplete, BodyTooLarge, ContentTypeNotSupported, ParseError
from web.http.wsgi import WsgiRequest, read_body

JSON: Final = "application/json"
# Deeper data would be accepted here and then overflow the stack when a
# transition copies the task, leaving it stuck; protobuf's JSON parser
# (A2A 1.0 clients) has the same limit.
MAX_DEPTH: Final = 100


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


def require_json(
    mimetype: str, refusal: type[ContentTypeNotSupported] = ContentTypeNotSupported
) -> None:
    """Request bodies are JSON. Refusing anything else also keeps browsers
    out: a page can send text/plain or a form without asking, not JSON."""
    if mimetype != JSON and not mimetype.endswith("+json"):
        shown = mimetype or "none"
        raise refusal(f"Content-Type {shown!r} is not supported: send application/json")


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
