"""A request's header block, read for gevent's handler with the standard
library's limits and meaning, without the email parser where it is not
needed.

gevent reads headers with `http.client.parse_headers`, which hands the
block to `email.parser`: a general MIME parser, and most of the embedded
server's cost of a small request. A block whose every line is a plain
`name: value` (a token for a name, no folding, no stray CR) means exactly
what the email parser would make of it, so its lines are stored as that
parser stores them (`set_raw`, the value without its leading blanks and
line end); any other block goes to the email parser as before. Either way
the lines are read by `http.client`'s own reader, with its line and count
limits. `tests/test_request_headers.py` compares both ways on generated
blocks, and fails by name if `http.client` or gevent moves what this uses.

A plain block's message also keeps each name's first value at hand:
gevent asks `get` for several fields of every request, and the email
message answers each by walking every line; and it gives the WSGI
environment's `HTTP_*` items straight from its lines, where gevent formats
each line as text and splits it again.
"""

from __future__ import annotations

import email.parser
import http.client
import re
from collections.abc import Iterator
from typing import IO, Any, Final

from gevent.pywsgi import OldMessage

# A field name (RFC 9110's token), a colon, a value with no CR or LF, the line end.
_PLAIN: Final = re.compile(r"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):([^\r\n]*)\r?\n")


def parse_request_headers(fp: IO[bytes]) -> Any:
    """What gevent's `headers_factory` returns for the same stream: the
    headers, or an empty message whose `status` says a line was too long."""
    try:
        lines = http.client._read_headers(fp)  # type: ignore[attr-defined]
    except http.client.LineTooLong:
        refused = OldMessage()
        refused.status = "Line too long"
        return refused
    fields = []
    for line in lines[:-1]:  # the last is the blank line (or the end of the stream)
        plain = _PLAIN.fullmatch(line.decode("iso-8859-1"))
        if plain is None:
            block = b"".join(lines).decode("iso-8859-1")
            return email.parser.Parser(_class=OldMessage).parsestr(block)
        fields.append((plain.group(1), plain.group(2).lstrip(" \t")))
    return PlainHeaders(fields)


# What gevent leaves out of the `HTTP_*` items: the two it sets under their own keys.
_OWN_KEYS: Final = ("CONTENT_TYPE", "CONTENT_LENGTH")


class PlainHeaders(OldMessage):  # type: ignore[misc]
    """gevent's message for a block of plain lines, each name's first value
    kept by its lowercase name. gevent reads it, and removes one field of a
    chunked request; those are the changes kept in step."""

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        super().__init__()
        self._first: dict[str, str] = {}
        for name, value in fields:
            self.set_raw(name, value)
            self._first.setdefault(name.lower(), value)

    def get(self, name: str, failobj: Any = None) -> Any:
        # The email message's `get` returns the first line's value through its
        # policy, which leaves a value read as ISO-8859-1 as it is.
        return self._first.get(name.lower(), failobj)

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        self._first.pop(name.lower(), None)

    def environ_items(self) -> Iterator[tuple[str, str]]:
        """What gevent's handler makes of these lines for the environment:
        `HTTP_<NAME>` and the value without surrounding blanks, in order; no
        name with an underscore (it would pass for a dash)."""
        for name, value in self._headers:
            if "_" in name:
                continue
            key = name.replace("-", "_").upper()
            if key not in _OWN_KEYS:
                yield "HTTP_" + key, value.strip()
