"""A test agent that writes a burst of events between two gates the test
opens, for in-process workers (the front end and the worker threads in the
test's own process): `TOOLNEXUS_RUN=tests.support.burst_agent:burst`.

`<name> <n>`: one progress message; at the gate `<name>-burst` (see
`tests.support.agents.gate`), then n chunks of the artifact `burst`, saved
as fast as the store takes them; at the gate `<name>-after`, then one more
progress message, then done.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from tests.support.agents import gate
from toolnexus import Chunk, Progress

# How long the agent waits at a gate before it gives up (the test failed).
GATE_TIMEOUT = 30.0


def through(name: str) -> None:
    """Reach the gate `name`, say so, and wait there until the test opens it."""
    entered, opened = gate(name)
    entered.set()
    if not opened.wait(GATE_TIMEOUT):
        raise RuntimeError(f"the gate {name} was never opened")


def burst(text: str) -> Generator[Any, None, str]:
    name, _, count = text.partition(" ")
    yield Progress("before the burst")
    through(f"{name}-burst")
    for n in range(int(count)):
        yield Chunk(f"{n} ", artifact="burst")
    through(f"{name}-after")
    yield Progress("after the burst")
    return "burst done"
