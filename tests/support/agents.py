"""A test agent whose message text says what it does, for runs against real
workers: `TOOLNEXUS_RUN=tests.support.agents:scripted` (with the checkout on
PYTHONPATH).

- `fail: <why>` raises; `reject: <why>` rejects; `ask: <question>` asks back;
- `sleep <seconds> <text>` sleeps first; `steps <seconds> <text>` takes
  `seconds` over four progress messages;
- `stubborn <seconds>` blocks SIGUSR1 (Celery's soft time limit) and
  sleeps: only the hard time limit can stop it;
- anything else is echoed.

When `SCRIPTED_RUNS` names a file, every call appends its text and process
id there first, so a test can count how often the function really ran, and
where.

`rich` goes through every kind of mutation A2A 1.1 counts: "go" reports
progress, streams three chunks of an artifact and asks back; the answer
adds a chunk and finishes; "wait <gate>" waits at that gate (in-process
workers: a task to cancel, let go once canceled).

`gated` is for in-process workers only (the front end and the worker threads
in the test's own process): it waits at a named gate the test opens, so a
test synchronises on events instead of on how fast threads run.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolnexus import Ask, Checkpoint, Chunk, Done, Progress, Reject, Retry


def scripted(text: str) -> object:
    runs = os.environ.get("SCRIPTED_RUNS")
    if runs:
        with open(runs, "a", encoding="utf-8") as log:
            log.write(f"{text.replace(chr(10), ' ')}\t{os.getpid()}\n")
    verb, _, rest = text.partition(" ")
    if verb == "fail:":
        raise RuntimeError(rest)
    if verb == "reject:":
        return Reject(rest)
    if verb == "ask:":
        return Ask(rest)
    if verb == "stubborn":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        time.sleep(float(rest))
        return {"text": "outlived every limit"}
    if verb == "sleep":
        seconds, _, rest = rest.partition(" ")
        time.sleep(float(seconds))
    if verb == "steps":
        seconds, _, rest = rest.partition(" ")
        return _steps(float(seconds), rest)
    return {"text": f"ran: {rest or text}"}


def attempted(text: str, attempt: int) -> object:
    """`scripted` knowing its attempt: `hang-until <n> <text>` blocks on every
    attempt before the n-th (a test kills its process), `retry-until <n>
    <text>` asks for another attempt before the n-th; then it answers
    saying which attempt it was."""
    verb, _, rest = text.partition(" ")
    until, _, rest = rest.partition(" ")
    if verb in ("hang-until", "retry-until") and attempt < int(until):
        scripted(f"attempt {attempt}")  # logged with this process's id
        if verb == "retry-until":
            raise Retry(f"busy on attempt {attempt}", after=0.1)
        time.sleep(300)
    return {"text": f"ran: {rest} on attempt {attempt}"}


def stepping(text: str, attempt: int, checkpoint: int | None) -> Iterator[Any]:
    """`<steps> <seconds> [<tag>]`: that many steps of `seconds` each, a
    progress message and a checkpoint after each, from the step after
    `checkpoint`; each step's start is logged (`scripted`) as `[<tag> ]attempt
    <a> step <n>`."""
    steps, seconds, *tag = text.split(" ")
    for step in range((checkpoint or 0) + 1, int(steps) + 1):
        scripted(" ".join([*tag, f"attempt {attempt} step {step}"]))
        time.sleep(float(seconds or 0))
        yield Progress(f"step {step}")
        yield Checkpoint(step)
    return f"{steps} steps"


def _steps(seconds: float, text: str) -> Iterator[Any]:
    for n in range(STEPS):
        time.sleep(seconds / STEPS)
        yield Progress(f"step {n + 1} of {STEPS}")
    return {"text": f"ran: {text}"}


STEPS = 4


def rich(text: str, task: dict[str, Any]) -> Iterator[Any]:
    if text.startswith("wait "):
        _, opened = gate(text.removeprefix("wait "))
        opened.wait(30)
        return
    if any(m.get("role") == "agent" for m in task.get("history", [])):
        yield Chunk(" and again", artifact="story", last=True)
        yield Done("told")
        return
    yield Progress("starting")
    for n in range(3):
        yield Chunk(f"part {n}", artifact="story", last=False)
    yield Ask("more?")


def runs_of(path: str, text: str) -> list[int]:
    """The process ids of the calls of `scripted` with `text`, by the SCRIPTED_RUNS file."""
    try:
        with open(path, encoding="utf-8") as log:
            calls = [line.rstrip("\n").rpartition("\t") for line in log]
    except FileNotFoundError:
        return []
    return [int(pid) for called, _, pid in calls if called == text]


_GATES: dict[str, tuple[threading.Event, threading.Event]] = {}
_GATES_LOCK = threading.Lock()


def gate(name: str) -> tuple[threading.Event, threading.Event]:
    """The gate `name`: (entered, open). `gated` sets `entered` when it
    reaches the gate; the test sets `open` to let it through."""
    with _GATES_LOCK:
        return _GATES.setdefault(name, (threading.Event(), threading.Event()))


def gated(text: str) -> Iterator[Any]:
    """`<gate> <n>`: reach the gate and wait there, emitting nothing, until
    the test opens it; then n progress messages, then done."""
    name, _, rest = text.partition(" ")
    entered, opened = gate(name)
    entered.set()
    if not opened.wait(300):
        raise RuntimeError(f"the gate {name} was never opened")
    count = int(rest or 3)
    for n in range(count):
        yield Progress(f"step {n + 1} of {count}")
    return f"through the gate {name}"


async def ticking(text: str) -> str:
    """`<path> <seconds>`: append a line to the file at `path` ten times a
    second for `seconds`, so a test sees whether the call still runs (a
    stopped call stops growing the file), in any pool: a killed process, or
    an I/O call's coroutine cancelled at its next await."""
    path, _, seconds = text.partition(" ")
    deadline = time.monotonic() + float(seconds or 60)
    while time.monotonic() < deadline:
        with open(path, "a", encoding="utf-8") as ticks:
            ticks.write(f"{os.getpid()}\n")
        await asyncio.sleep(0.1)
    return "ticked to the end"


def scripted_fleet(runs: Path, *, stale_after: float) -> dict[str, str]:
    """The settings of a fleet (`LocalStack`) whose workers run `scripted`,
    logging every run to `runs`, with a heartbeat, reaper and push retries
    quick enough for a test to see faults dealt with in seconds."""
    return {
        "TOOLNEXUS_RUN": "tests.support.agents:scripted",
        "SCRIPTED_RUNS": str(runs),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),  # beat runs in its own folder
        "TOOLNEXUS_CONCURRENCY": "4",
        "TOOLNEXUS_HEARTBEAT": "0.5",
        "TOOLNEXUS_STALE_AFTER": f"{stale_after:g}",
        "TOOLNEXUS_REAP_EVERY": "1",
        "TOOLNEXUS_PUSH_ALLOWED_HOSTS": "127.0.0.1",
        "TOOLNEXUS_PUSH_SWEEP": "0.5",
        "TOOLNEXUS_PUSH_BACKOFF": "0.2",
        "TOOLNEXUS_PUSH_BACKOFF_MAX": "1",
    }
