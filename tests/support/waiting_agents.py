"""Agents that wait, for the I/O-mode workers' tests (tests/test_worker_pools.py).

Each takes a `Gate` as its text (JSON): it waits until the gate's `go`
file exists, then `then` seconds more, and leaves marks in `marks`, named
after its task: `<id>.started`, `<id>.cancelled` when its coroutine sees
CancelledError, and one `<id>.done.<n>` per run that got to its end (two of
them would be a task run twice). The blocking twins wait the same way with
`time.sleep`.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from toolnexus import Done, Progress

POLL = 0.05


@dataclass(frozen=True)
class Gate:
    go: str
    marks: str
    then: float = 0.0
    items: int = 0  # the streaming agents: how many progress items

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, text: str) -> Gate:
        return cls(**json.loads(text))

    def mark(self, task: dict[str, Any], what: str) -> None:
        Path(self.marks, f"{task['id']}.{what}").write_text(f"{time.time():.6f}")

    def done(self, task: dict[str, Any]) -> None:
        self.mark(task, f"done.{uuid.uuid4().hex[:8]}")

    def open(self) -> bool:
        return Path(self.go).exists()


async def gated(text: str, task: dict[str, Any]) -> str:
    gate = Gate.decode(text)
    gate.mark(task, "started")
    try:
        while not gate.open():
            await asyncio.sleep(POLL)
        await asyncio.sleep(gate.then)
    except asyncio.CancelledError:
        gate.mark(task, "cancelled")
        raise
    gate.done(task)
    return "done"


def gated_blocking(text: str, task: dict[str, Any]) -> str:
    gate = Gate.decode(text)
    gate.mark(task, "started")
    while not gate.open():
        time.sleep(POLL)
    time.sleep(gate.then)
    gate.done(task)
    return "done"


async def counting(text: str, task: dict[str, Any]) -> AsyncIterator[object]:
    """`items` progress messages "0", "1", ... once the gate opens, then done."""
    gate = Gate.decode(text)
    gate.mark(task, "started")
    while not gate.open():
        await asyncio.sleep(POLL)
    for number in range(gate.items):
        await asyncio.sleep(0.01)
        yield Progress(str(number))
    gate.done(task)
    yield Done("counted")


def counting_blocking(text: str, task: dict[str, Any]) -> Iterator[object]:
    gate = Gate.decode(text)
    gate.mark(task, "started")
    while not gate.open():
        time.sleep(POLL)
    for number in range(gate.items):
        time.sleep(0.01)
        yield Progress(str(number))
    gate.done(task)
    yield Done("counted")


async def hogging(text: str) -> str:
    """An async agent that blocks its event loop for `text` seconds (CPU-bound work)."""
    time.sleep(float(text))
    return "hogged"
