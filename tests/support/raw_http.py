"""HTTP over a raw socket: requests no client library would send."""

from __future__ import annotations

import contextlib
import re
import socket
from dataclasses import dataclass

_BODY = b'{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}'


def _post(head: bytes, body: bytes = _BODY) -> bytes:
    return (
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + head
        + b"\r\n"
        + body
    )


def _length(body: bytes = _BODY) -> bytes:
    return b"Content-Length: %d\r\n" % len(body)


# Requests an HTTP server cannot read: issue 12, finding 7.
FRAMING_CASES: dict[str, bytes] = {
    "NUL in a header": _post(b"X-Note: a\x00b\r\n" + _length()),
    "Content-Length not a number": _post(b"Content-Length: abc\r\n"),
    "negative Content-Length": _post(b"Content-Length: -5\r\n"),
    "two Content-Lengths": _post(b"Content-Length: 3\r\nContent-Length: 7\r\n"),
    "a 70 KB header": _post(b"X-Big: " + b"a" * 70_000 + b"\r\n" + _length()),
    "1,000 headers": _post(b"".join(b"X-H%d: v\r\n" % n for n in range(1000)) + _length()),
    "a garbage request line": b"\x16\x03\x01\x02\x00garbage\r\n\r\n",
    "a request line that is one word": b"HELLO\r\n\r\n",
    "a 70 KB request target": b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
}


@dataclass(frozen=True)
class RawReply:
    status: int
    headers: dict[str, str]
    body: bytes


def exchange(address: tuple[str, int], data: bytes, timeout: float = 10) -> RawReply:
    """Send `data` as it is; read one whole response (Content-Length framed,
    or until the server closes)."""
    with socket.create_connection(address, timeout=timeout) as connection:
        # The server may answer and close before reading it all.
        with contextlib.suppress(OSError):
            connection.sendall(data)
        received = b""
        while True:
            try:
                chunk = connection.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            received += chunk
            head, found, body = received.partition(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length: *(\d+)\r?$", head)
            if found and length and len(body) >= int(length.group(1)):
                break
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status_line = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
    assert status_line, f"no HTTP status line in {received[:200]!r}"
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return RawReply(int(status_line.group(1)), headers, body)
