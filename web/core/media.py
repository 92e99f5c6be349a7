"""Media types: which the agent accepts, and what each received part is."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

DEFAULT_BY_KIND = {
    "text": "text/plain",
    "data": "application/json",
    "file": "application/octet-stream",
}


def part_media_type(part: Mapping[str, Any]) -> str:
    """The media type a received part declares (1.0 `mediaType`, 0.3
    `file.mimeType`), or the natural one for its kind."""
    declared = part.get("mediaType")
    if declared is None and isinstance(part.get("file"), Mapping):
        declared = part["file"].get("mimeType")
    if isinstance(declared, str) and declared:
        return declared
    if "text" in part or part.get("kind") == "text":
        return DEFAULT_BY_KIND["text"]
    if "data" in part or part.get("kind") == "data":
        return DEFAULT_BY_KIND["data"]
    return DEFAULT_BY_KIND["file"]


def accepts(modes: Iterable[str], media_type: str) -> bool:
    """True when `media_type` matches one of `modes` (`*/*` and `image/*` ranges allowed)."""
    kind, _, subtype = media_type.split(";")[0].strip().lower().partition("/")
    for mode in modes:
        want_kind, _, want_subtype = mode.lower().partition("/")
        if want_kind in ("*", kind) and want_subtype in ("*", subtype):
            return True
    return False
