"""Answers from child processes, waited for as long as the children live.

A spawned child imports the service before it does anything, which takes
seconds on a loaded machine: a fixed `queue.get(timeout=...)` then fails a
test whose children were only slow. Here the outcome decides: an answer, or
a child that ended (or crashed) without giving one, which fails at once.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Sequence
from multiprocessing.process import BaseProcess
from typing import Any

# Only so a hung child cannot hang the suite; below the per-test timeout
# (pyproject), so the failure says which child.
LIMIT = 100.0
_LOOK = 0.5  # seconds between looks at the children while no answer comes


def answers_of(children: Sequence[BaseProcess], answers: Any, limit: float = LIMIT) -> list[Any]:
    """One answer per child from the `answers` queue, in the order they came."""
    got: list[Any] = []
    deadline = time.monotonic() + limit
    while len(got) < len(children):
        try:
            got.append(answers.get(timeout=_LOOK))
            continue
        except queue.Empty:
            pass
        crashed = [child for child in children if child.exitcode not in (None, 0)]
        assert not crashed, f"children ended without answering: {_described(crashed)}"
        if all(child.exitcode is not None for child in children):
            # A child flushes its answers before it exits: whatever is still
            # in the pipe arrives now, or never was sent.
            try:
                got.append(answers.get(timeout=5))
                continue
            except queue.Empty:
                raise AssertionError(
                    f"{len(children) - len(got)} of the children exited without answering"
                ) from None
        assert time.monotonic() < deadline, f"no answer in {limit:g} s: {_described(children)}"
    return got


def answer_of(child: BaseProcess, answers: Any, limit: float = LIMIT) -> Any:
    """The one answer `child` puts on `answers`."""
    (answer,) = answers_of([child], answers, limit)
    return answer


def ended_well(child: BaseProcess, limit: float = LIMIT) -> None:
    """Wait for `child` to end, and fail unless it exited with 0."""
    child.join(limit)
    assert child.exitcode == 0, f"child {_described([child])}"


def _described(children: Sequence[BaseProcess]) -> str:
    return ", ".join(f"{child.name} (pid {child.pid}, exit {child.exitcode})" for child in children)
