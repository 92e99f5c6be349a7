"""A test agent whose message text says what it does, for runs against real
workers: `TOOLNEXUS_RUN=tests.support.agents:scripted` (with the checkout on
PYTHONPATH).

- `fail: <why>` raises; `reject: <why>` rejects; `ask: <question>` asks back;
- `sleep <seconds> <text>` sleeps first;
- anything else is echoed.

When `SCRIPTED_RUNS` names a file, every call appends its text there first,
so a test can count how often the function really ran.
"""

from __future__ import annotations

import os
import time

from toolnexus import Ask, Reject


def scripted(text: str) -> object:
    runs = os.environ.get("SCRIPTED_RUNS")
    if runs:
        with open(runs, "a", encoding="utf-8") as log:
            log.write(text.replace("\n", " ") + "\n")
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


def runs_of(path: str, text: str) -> int:
    """How many times `scripted` was called with `text`, by the SCRIPTED_RUNS file."""
    try:
        with open(path, encoding="utf-8") as log:
            return sum(1 for line in log if line.rstrip("\n") == text)
    except FileNotFoundError:
        return 0
