"""Free ports for the servers a test starts, none of which another test can take.

A port found free by binding port 0 and closing the socket is free only
until someone else binds it: the kernel hands the same number to the next
process asking for any port (another pytest-xdist worker's server, or any
outgoing connection, whose local port comes from the same ephemeral range).
So the ports handed out here come from below the kernel's ephemeral range,
where the kernel never picks one by itself, and each xdist worker has a
block of its own: a port one worker hands out (and even leaves unbound on
purpose) is never handed out by another, nor taken by a connection. Within
a worker, tests run one at a time and each port is handed out once (the
block wraps only after thousands).
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

LOWEST: Final = 10_000
# One block per xdist worker (gw0, gw1, ...), and the last one for a run
# without xdist; the suite runs four workers.
BLOCKS: Final = 8
EPHEMERAL_RANGE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel picks from by itself (Linux's default where unreadable)."""
    try:
        low, high = EPHEMERAL_RANGE.read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32_768, 60_999


def block(worker: str | None, blocks: int = BLOCKS) -> range:
    """The ports of one xdist worker (`PYTEST_XDIST_WORKER`, None without xdist)."""
    size = (ephemeral_range()[0] - LOWEST) // blocks
    index = blocks - 1
    if worker is not None and worker.startswith("gw") and worker[2:].isdigit():
        index = int(worker[2:]) % (blocks - 1)
    start = LOWEST + index * size
    return range(start, start + size)


def _cycle(ports: range) -> Iterator[int]:
    offset = random.randrange(len(ports))  # another run of the suite starts elsewhere
    return itertools.cycle([*ports[offset:], *ports[:offset]])


_LOCK = threading.Lock()
_NEXT = _cycle(block(os.environ.get("PYTEST_XDIST_WORKER")))


def free_port() -> int:
    """A port of this worker's block that nothing listens on or is bound to now."""
    with _LOCK:
        for _ in range(len(block(os.environ.get("PYTEST_XDIST_WORKER")))):
            port = next(_NEXT)
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:  # a server of an earlier test still holds it
                    continue
            return port
    raise RuntimeError("no free port left in this worker's block")
