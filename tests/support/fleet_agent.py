"""The agent behind the fleet dashboard's tests
(`TOOLNEXUS_RUN=tests.support.fleet_agent:run`): `sleep <seconds>` completes
after that long, `fail` raises, anything else completes at once."""

from __future__ import annotations

import time


def run(text: str) -> str:
    verb, _, rest = text.partition(" ")
    if verb == "sleep":
        time.sleep(float(rest))
        return "slept"
    if verb == "fail":
        raise RuntimeError("failed as asked")
    return f"ran: {text}"
