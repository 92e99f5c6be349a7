"""The A2A version a request asks for: the `A2A-Version` header (or gRPC's
`a2a-version` metadata), read the same way by every binding."""

from __future__ import annotations

from typing import Final

from shared.dialects import V03, V10, V11, VERSIONS
from shared.quoting import shown
from web.core.errors import VersionNotSupported

VERSION_HEADER: Final = "A2A-Version"


def wire_version(header: str | None) -> str | None:
    """The `A2A-Version` header as V03, V10 or V11 (None: no header). Only
    major.minor counts, so "1.0.0" is 1.0."""
    if header in VERSIONS:  # as clients send it: nothing to take apart
        return header
    if header is None or not header.strip():
        return None
    major_minor = ".".join(header.strip().split(".")[:2])
    if major_minor in VERSIONS:
        return major_minor
    raise VersionNotSupported(
        f"A2A-Version {shown(header.strip(), 20)} is not supported;"
        f" use {V10!r}, {V11!r} (a draft) or {V03!r}"
    )


def typed_errors(version_header: str | None) -> bool:
    """Whether a JSON-RPC error to a request with this header carries 1.0's
    typed `data` (a header naming any 1.x version asks for it)."""
    return version_header is not None and version_header.strip().startswith("1.")
