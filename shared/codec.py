"""JSON in and out of the stores and the wire: one place, one strictness.

orjson does the work where it gives the same answer as the standard
library, which takes over where it would not: integers beyond 64 bits
(orjson refuses them on output, and would read them back as floats) and
anything else it refuses. `encode` refuses what is not JSON (NaN, lone
surrogates that no UTF-8 store could write back) instead of writing
something no reader accepts.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# 19 digits in a row: possibly an integer too big for 64 bits. Found as a
# run of "0" once every digit is made one: a regular expression takes
# longer over a task than orjson takes to read it.
_DIGITS_AS_ZERO = bytes.maketrans(b"0123456789", b"0" * 10)
_LONG_RUN = b"0" * 19


def strict_json(value: Any) -> str:
    """`value` as JSON text, refusing what JSON cannot carry (NaN, infinities,
    objects of other kinds) where the fast encoder would write null."""
    return _compact.encode(value)


def encode_bytes(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # a 64-bit overflow, or a surrogate: the strict encoder decides
        return _compact.encode(value).encode("utf-8")


def encode(value: Any) -> str:
    return encode_bytes(value).decode("utf-8")


def may_hold_long_integer(raw: bytes) -> bool:
    """True when `raw` may hold an integer beyond 64 bits, which orjson
    would read as a float: the standard library must read it."""
    return _LONG_RUN in raw.translate(_DIGITS_AS_ZERO)


def copied(value: Any) -> tuple[Any, int]:
    """A fresh copy of JSON-shaped `value`, shared with nothing, and the
    length of its JSON. What orjson wrote holds no integer beyond 64 bits,
    so it reads its own output back without the scan `decode` makes."""
    try:
        raw = orjson.dumps(value)
    except TypeError:
        raw = _compact.encode(value).encode("utf-8")
        return json.loads(raw), len(raw)
    return orjson.loads(raw), len(raw)


def decode(data: str | bytes) -> Any:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if may_hold_long_integer(raw):
        return json.loads(raw)
    return orjson.loads(raw)
