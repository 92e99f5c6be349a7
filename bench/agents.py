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

import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from toolnexus import Done, Progress

READY = "ready"
STAMP = "event"


@dataclass(frozen=True)
class Plan:
    events: int
    interval: float  # seconds between two events of one task
    phase: float  # seconds after the go time of the first event
    go: str  # the file whose appearance starts the events; it holds the go time

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


# How often a waiting task looks for the go file.
GO_POLL = 0.2


def streamer(text: str) -> Iterator[object]:
    plan = Plan.decode(text)
    yield Progress(READY)
    start = plan.go_time()
    while start is None:
        time.sleep(GO_POLL)
        start = plan.go_time()
    for number in range(plan.events):
        time.sleep(max(0.0, plan.due(start, number) - time.time()))
        yield Progress(stamp(number))
    yield Done("done")
