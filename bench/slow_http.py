"""A slow local HTTP server: the real I/O that bench/waiting.py's agents wait on.

    python3 -m bench.slow_http PORT

`GET /wait?seconds=S&id=ID` answers `ok` after S seconds and counts one
call for ID (a task run twice calls twice); `GET /counts` answers those
counts as JSON. One asyncio process holds any number of waiting requests.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from urllib.parse import parse_qs, urlsplit

BACKLOG = 4096
_counts: Counter[str] = Counter()


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        target = head.split(b" ", 2)[1].decode()
        url = urlsplit(target)
        query = parse_qs(url.query)
        if url.path == "/counts":
            body = json.dumps(_counts).encode()
        else:
            _counts[query.get("id", [""])[0]] += 1
            await asyncio.sleep(float(query.get("seconds", ["2"])[0]))
            body = b"ok"
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
    except (OSError, asyncio.IncompleteReadError, IndexError, ValueError):
        pass  # a probe that connected and left, or a malformed request
    finally:
        writer.close()


async def serve(port: int) -> None:
    server = await asyncio.start_server(_answer, "127.0.0.1", port, backlog=BACKLOG)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
