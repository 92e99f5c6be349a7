"""JSON in and out of the stores and the wire: one place, one strictness.

`encode` refuses what is not JSON (NaN, lone surrogates that no UTF-8 store
could write back) instead of writing something no reader accepts.
"""

from __future__ import annotations

import json
from typing import Any

_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode(value: Any) -> str:
    return _compact.encode(value)


def encode_bytes(value: Any) -> bytes:
    return _compact.encode(value).encode("utf-8")


def decode(data: str | bytes) -> Any:
    return json.loads(data)
