"""What every framework adapter reads of a message, written once: its parts
as text, for a framework that takes only text (a data part as its JSON, a
file as one line naming it)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from toolnexus import Data, File, PartLike


def part_as_text(part: PartLike) -> str:
    """One part as text."""
    if isinstance(part, Data):
        return json.dumps(part.value)
    if isinstance(part, File):
        described = [part.name or "unnamed", part.media_type or "unknown type"]
        if part.content is not None:
            described.append(f"{len(part.content)} bytes")
        elif part.url:
            described.append(part.url)
        return f"[file {', '.join(described)}]"
    return part


def as_text(parts: Sequence[PartLike]) -> str:
    """Parts as text, one per line."""
    return "\n".join(part_as_text(part) for part in parts)
