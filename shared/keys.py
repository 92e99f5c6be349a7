"""Keys made from client-chosen strings."""

from __future__ import annotations

import hashlib


def digest(*parts: str) -> str:
    """A fixed-length, file-name-safe key for client-chosen strings (message
    and context ids, owners), so no client value ever becomes a key or a path."""
    joined = "\x1f".join(parts).encode("utf-8", "surrogatepass")
    return hashlib.sha256(joined).hexdigest()
