"""A test agent whose message text says what it does, for runs against real
workers: `TOOLNEXUS_RUN=tests.support.agents:scripted` (with the checkout on
PYTHONPATH).

- `fail: <why>` raises; `reject: <why>` rejects; `ask: <question>` asks back;
- `sleep <seconds> <text>` sleeps first;
- anything else is echoed.

When `SCRIPTED_RUNS` names a file, every call appends its text and process
id there first, so a test can count how often the function really ran, and
where.
"""

from __future__ import annotations

import os
import time

from toolnexus import Ask, Reject


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
    if verb == "sleep":
        seconds, _, rest = rest.partition(" ")
        time.sleep(float(seconds))
    return {"text": f"ran: {rest or text}"}


def runs_of(path: str, text: str) -> list[int]:
    """The process ids of the calls of `scripted` with `text`, by the SCRIPTED_RUNS file."""
    try:
        with open(path, encoding="utf-8") as log:
            calls = [line.rstrip("\n").rpartition("\t") for line in log]
    except FileNotFoundError:
        return []
    return [int(pid) for called, _, pid in calls if called == text]
