"""What a text-only agent reads of a message with files or data in it.

Nothing a peer sends is dropped without a trace: text parts come through as
they are, a data part as its JSON, and a file as one line naming it, e.g.
`[file report.pdf, application/pdf, 18204 bytes]`. An agent that needs the
files themselves declares a `message` parameter (see `toolnexus.parts_of`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from shared.codec import encode


def message_as_text(message: Mapping[str, Any]) -> str:
    return "\n".join(part_as_text(part) for part in message.get("parts") or [])


def part_as_text(part: Mapping[str, Any]) -> str:
    kind = part.get("kind")
    if kind == "text":
        return str(part.get("text", ""))
    if kind == "data":
        return encode(part.get("data"))
    file: Mapping[str, Any] = part.get("file") or {}
    described = [str(file["name"])] if file.get("name") else []
    if file.get("mimeType"):
        described.append(str(file["mimeType"]))
    if "bytes" in file:
        described.append(f"{_size(file['bytes'])} bytes")
    elif file.get("uri"):
        described.append(str(file["uri"]))
    return f"[file {', '.join(described)}]"


def _size(encoded: object) -> int:
    try:
        return len(base64.b64decode(str(encoded), validate=True))
    except (binascii.Error, ValueError):
        return len(str(encoded)) * 3 // 4
