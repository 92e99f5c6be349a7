"""The agent behind the failed-task triage tests
(`TOOLNEXUS_RUN=tests.support.triage_agent:run`): the message's first word
says how it fails, unless the message is a rerun (it names the task it runs
again in `referenceTaskIds`), which completes.

- `value <words>`: raises ValueError;
- `key <words>`: raises KeyError;
- `slow <words>`: sleeps past a short TOOLNEXUS_TIME_LIMIT (the fleet's workers
  stop it there; the embedded server has no time limit);
- anything else completes.
"""

from __future__ import annotations

import time
from typing import Any


def run(text: str, message: dict[str, Any]) -> str:
    verb = text.partition(" ")[0]
    if message.get("referenceTaskIds"):
        return f"ran again: {text}"
    if verb == "value":
        raise ValueError(f"bad value in {text!r}")
    if verb == "key":
        raise KeyError(text)
    if verb == "slow":
        time.sleep(60)
    return f"done: {text}"
