"""The benchmarks' agents: `TOOLNEXUS_RUN=bench.agents:streamer`.

`streamer` is what bench/streams.py drives: its message is a `Plan` (JSON),
it says "ready" at once, waits until the benchmark writes the go file (all
streams are open), then emits `events` progress messages `interval` seconds
apart, shifted by `phase` so that a thousand tasks spread their events
evenly, each stamped with the wall-clock time it was made; then it
completes. bench/sdk_peer.py runs the same plan in the a2a-sdk server, so
both servers stream the same events at the same times.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from toolnexus import Done, Progress

READY = "ready"
STAMP = "event"


@dataclass(frozen=True)
class Plan:
    events: int
    interval: float  # seconds between two events of one task
    phase: float  # seconds after the go time of the first event
    go: str  # the file whose appearance starts the events; it holds the go time
    # How often a waiting task looks for the go file: every waiting task's
    # look costs the worker a wake-up, and 10,000 of them every 0.2 s kept
    # 2 cores busy. A late look delays no latency: each event is timed as made.
    poll: float = 0.2

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, text: str) -> Plan:
        return cls(**json.loads(text))

    def go_time(self) -> float | None:
        """The wall-clock go time, once the benchmark has written it."""
        try:
            return float(Path(self.go).read_text())
        except (OSError, ValueError):
            return None

    def due(self, start: float, number: int) -> float:
        return start + self.phase + number * self.interval


def stamp(number: int) -> str:
    """An event's text: its number and the time it was made."""
    return f"{STAMP} {number} {time.time():.6f}"


def stamped(text: str) -> tuple[int, float] | None:
    """(number, time made) of a `stamp`, None for any other text."""
    head, _, rest = text.partition(" ")
    if head != STAMP:
        return None
    number, _, made = rest.partition(" ")
    return int(number), float(made)


async def streamer(text: str) -> AsyncIterator[object]:
    # A coroutine, run on the worker's one loop (TOOLNEXUS_POOL=asyncio): 10,000
    # waiting tasks as threads kept both cores busy switching between them, and
    # that load, not the front end, became what bench/streams.py measured.
    plan = Plan.decode(text)
    yield Progress(READY)
    start = plan.go_time()
    while start is None:
        await asyncio.sleep(plan.poll)
        start = plan.go_time()
    for number in range(plan.events):
        await asyncio.sleep(max(0.0, plan.due(start, number) - time.time()))
        yield Progress(stamp(number))
    yield Done("done")


# --- bench/waiting.py: agents that wait on real I/O --------------------------------


async def http_get(url: str) -> bytes:
    """GET `url` (plain HTTP, `Connection: close`) with asyncio streams: the
    least client code, so the benchmark measures the servers, not a client."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
    try:
        target = f"{parts.path or '/'}?{parts.query}" if parts.query else parts.path or "/"
        head = f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n"
        writer.write(head.encode())
        await writer.drain()
        reply = await reader.read()
    finally:
        writer.close()
    status = reply.split(b" ", 2)[1:2]
    if status != [b"200"]:
        raise RuntimeError(f"GET {url}: {reply[:80]!r}")
    return reply.partition(b"\r\n\r\n")[2]


def counted(url: str, task_id: str) -> str:
    """The slow server's URL with the task's id, so it counts each run."""
    return f"{url}&id={task_id}"


# The message (which names its task), not the whole task: a smaller copy per call.
async def waiting(text: str, message: dict[str, Any]) -> str:
    """Waits on bench/slow_http.py: `text` is its /wait URL."""
    await http_get(counted(text, message["taskId"]))
    return "waited"


def waiting_blocking(text: str, message: dict[str, Any]) -> str:
    """`waiting` as a plain blocking function (for TOOLNEXUS_POOL=threads)."""
    with urllib.request.urlopen(counted(text, message["taskId"]), timeout=120) as reply:
        reply.read()
    return "waited"


async def idle(text: str) -> str:
    """Waits until the wall-clock time `text` and does nothing else
    (bench/io_calls_idle.py)."""
    await asyncio.sleep(max(0.0, float(text) - time.time()))
    return "idled"


def idle_blocking(text: str) -> str:
    """`idle` as a plain blocking function (for TOOLNEXUS_POOL=threads)."""
    time.sleep(max(0.0, float(text) - time.time()))
    return "idled"
