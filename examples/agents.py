"""Example fulfilment functions: `TOOLNEXUS_RUN=examples.agents:<name>`.

The contract: `run(text) -> {"text": ...}` (a plain string is accepted too);
return `{"status": "pending", "text": prompt}` to ask the peer for more
input; raise to fail the task. Declare a `task` parameter to also receive
the stored task.
"""

from __future__ import annotations

import time
from typing import Any


def echo(text: str) -> dict[str, str]:
    """The default agent."""
    return {"text": f"ran: {text}"}


def slow(text: str) -> dict[str, str]:
    """Takes a few seconds: for cancel, heartbeat and scaling demos.

    A leading number sets the seconds, e.g. "0.3 hello".
    """
    head, _, rest = text.partition(" ")
    try:
        seconds = float(head)
    except ValueError:
        seconds, rest = 3.0, text
    time.sleep(seconds)
    return {"text": f"slept {seconds:g}s: {rest}"}


def fail(text: str) -> dict[str, str]:
    raise RuntimeError(f"fail agent refused: {text}")


def ask_back(text: str, task: dict[str, Any]) -> dict[str, str]:
    """Asks for a name first, then greets whoever answered."""
    asked = any(m.get("role") == "agent" for m in task.get("history", []))
    if not asked:
        return {"status": "pending", "text": "What is your name?"}
    return {"text": f"Hello, {text}!"}
