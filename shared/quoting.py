"""Bounded text for messages: client values are echoed, never in full."""

from __future__ import annotations


def truncated(text: str, limit: int = 60) -> str:
    """`text` cut to at most `limit` characters, ending in "..." when cut."""
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def shown(value: object, limit: int = 60) -> str:
    """The repr of `value`, bounded: for error messages that quote input."""
    return truncated(repr(value), limit)
