"""A task's runs: which attempt it is on, and which run may write.

A run that ends without an outcome (its worker died, or the agent asked for
another attempt with `toolnexus.Retry`) *releases* its task while attempts
remain: the task stays `working` to its peer (A2A has no retrying state),
with a status message naming the attempt and why, and the next delivery
*takes* it and calls the function again. Each release starts a new epoch;
a run writes only while the task is held at the epoch its claim saw, so a
run that lost its task (a worker paused past the stale threshold, cut off
by a partition) can write nothing more, on every store: the check is part of
the compare-and-append every write is (`shared.transitions`).

The record sits on the task under a private field (`FIELD`, never shown to
a peer: `shared.dialects`), changed by the events that claim and release
the task, by a run's checkpoints (private events no follower shows) and, with
more than one attempt, by each item a run publishes (its count since the
checkpoint); `shared.events.fold` merges each change into it. A task without
one is on its first attempt, epoch 0, held.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

FIELD: Final = "run"


@dataclass(frozen=True)
class Run:
    """`attempt`: the run of the current turn, from 1; `epoch`: how many
    times the task was released, ever (the fencing token); `held`: a run has
    it (False from a release until the next claim); `holder`: the process
    whose run holds it (`<pid>@<host>`); `due`: when a released task's
    next attempt may start (seconds since the epoch); `checkpoint`: the last
    value a run of this turn saved with `toolnexus.Checkpoint`, wrapped as
    `{"value": ...}` (None: none saved); `published`: how many items the
    turn's runs published since that checkpoint (since the turn began
    without one); `chunks`: the artifact id each chunked artifact's name
    writes to; `asked`: the last checkpoint of the turn that ended asking
    the peer (`toolnexus.Ask`, `NeedAuth`), wrapped the same way: the run of
    the peer's answer goes on from it (a framework's state at its question)."""

    attempt: int = 1
    epoch: int = 0
    held: bool = True
    holder: str = ""
    due: float = 0.0
    checkpoint: Mapping[str, Any] | None = None
    published: int = 0
    chunks: Mapping[str, str] = field(default_factory=dict)
    asked: Mapping[str, Any] | None = None

    @property
    def resumes_from(self) -> Any:
        """What the run goes on from: this turn's checkpoint, else the one the
        last turn saved when it asked the peer; None when neither is."""
        saved = self.checkpoint if self.checkpoint is not None else self.asked
        return saved["value"] if saved is not None else None


def run_of(item: Mapping[str, Any]) -> Run:
    """The run record a task carries (the defaults where it has none or a
    malformed one)."""
    record = item.get(FIELD)
    if not isinstance(record, Mapping):
        return Run()
    held, checkpoint, chunks = record.get("held"), record.get("checkpoint"), record.get("chunks")
    asked = record.get("asked")
    return Run(
        attempt=max(1, _count(record.get("attempt"))),
        epoch=_count(record.get("epoch")),
        held=held if isinstance(held, bool) else True,
        holder=holder if isinstance(holder := record.get("holder"), str) else "",
        due=float(due) if isinstance(due := record.get("due"), int | float) else 0.0,
        checkpoint=checkpoint
        if isinstance(checkpoint, Mapping) and "value" in checkpoint
        else None,
        published=_count(record.get("published")),
        chunks={
            name: artifact
            for name, artifact in (chunks.items() if isinstance(chunks, Mapping) else ())
            if isinstance(name, str) and isinstance(artifact, str)
        },
        asked=asked if isinstance(asked, Mapping) and "value" in asked else None,
    )


def _count(value: object) -> int:
    """`value` if it is a count, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def merged(task: Mapping[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
    """The task's run record with `event`'s changes to it applied."""
    return {**(task.get(FIELD) or {}), **event[FIELD]}


# What the status update of each move sets (merged into the task's record).
def first_claim(holder: str) -> dict[str, Any]:
    """A claim from `submitted` by `holder`: a new turn, on its first
    attempt, from no checkpoint."""
    return {
        "attempt": 1,
        "held": True,
        "holder": holder,
        "checkpoint": None,
        "published": 0,
        "chunks": {},
    }


def checkpoint_saved(value: Any, chunks: Mapping[str, str]) -> dict[str, Any]:
    """A checkpoint: what a later attempt resumes from, nothing published since."""
    return {"checkpoint": {"value": value}, "published": 0, "chunks": dict(chunks)}


def asking(value: Any) -> dict[str, Any]:
    """A turn that ends asking the peer: what its answer's run goes on from
    (None: from nothing)."""
    return {"asked": None if value is None else {"value": value}}


def published(count: int, chunks: Mapping[str, str]) -> dict[str, Any]:
    """An item a run published: `count` since the checkpoint."""
    return {"published": count, "chunks": dict(chunks)}


def taken(holder: str) -> dict[str, Any]:
    """A claim of a released task by `holder`: the attempt the release counted."""
    return {"held": True, "holder": holder}


def released(run: Run, due: float) -> dict[str, Any]:
    """A release: the next attempt, in a new epoch, held by nobody yet, to
    be taken from `due` (seconds since the epoch) on."""
    return {
        "attempt": run.attempt + 1,
        "epoch": run.epoch + 1,
        "held": False,
        "holder": "",
        "due": due,
    }


def process_name(pid: int | None = None) -> str:
    """A holder's name: the process (this one by default) on this host."""
    return f"{pid if pid is not None else os.getpid()}@{socket.gethostname()}"


def holds(epoch: int) -> Callable[[Mapping[str, Any]], bool]:
    """Whether a run that claimed the task at `epoch` still has it."""

    def check(task: Mapping[str, Any]) -> bool:
        run = run_of(task)
        return run.held and run.epoch == epoch

    return check


def releases(event: Mapping[str, Any]) -> bool:
    """Whether a logged event released its task (its run lost it)."""
    record = event.get(FIELD)
    return isinstance(record, Mapping) and record.get("held") is False


def takes_now(now: float) -> Callable[[Mapping[str, Any]], bool]:
    """Whether a delivery may take the task at `now`: released, and its
    backoff over (a copy of its message that comes early leaves it to the
    message queued for when it is due)."""

    def check(task: Mapping[str, Any]) -> bool:
        run = run_of(task)
        return not run.held and run.due <= now

    return check


@dataclass(frozen=True)
class Attempts:
    """How many runs a turn gets (`most`, 1: a run without an outcome fails
    the task) and the delay before each further one: `backoff` seconds,
    doubling per attempt up to `backoff_max`, each drawn at random from its
    upper half (jitter: runs released together do not start together)."""

    most: int = 1
    backoff: float = 1.0
    backoff_max: float = 60.0

    def left_after(self, run: Run) -> bool:
        return run.attempt < self.most

    def delay(self, run: Run, asked: float | None = None) -> float:
        """Before the attempt after `run`'s: `asked` (the agent's own
        `Retry(after=...)`) when given, else the backoff."""
        if asked is not None:
            return max(0.0, asked)
        ceiling = min(self.backoff * 2 ** (run.attempt - 1), self.backoff_max)
        return random.uniform(ceiling / 2, ceiling)

    def said(self, run: Run, reason: str, delay: float) -> str:
        """The status message of a release."""
        return (
            f"attempt {run.attempt} of {self.most} ended without an outcome ({reason});"
            f" attempt {run.attempt + 1} starts in {delay:.1f} s"
        )

    def gave_up(self, run: Run, reason: str) -> str:
        """The failure reason after the last attempt (`reason` alone with one)."""
        if self.most <= 1:
            return reason
        return f"{reason} (attempt {run.attempt} of {self.most}: no attempts left)"


# One run a turn: a run without an outcome fails its task.
ONE_RUN: Final = Attempts()
