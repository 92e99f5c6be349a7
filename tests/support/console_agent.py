"""The agent behind the console's browser tests
(`TOOLNEXUS_RUN=tests.support.console_agent:run`): the message's first word
says what it does.

- `report <words>`: completes with a data artifact and a file artifact;
- `links`: completes with two files by URL, one `https:`, one `javascript:`;
- `ask <anything>`: asks for a name, then greets whoever answered;
- `reply <words>`: answers with a message, not a task result;
- `gate <name> <words>`: reports progress, then waits until the file
  `<name>` appears in the folder CONSOLE_GATES names, then completes (so a
  test decides when a task the page is following finishes);
- anything else is echoed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolnexus import Artifact, Ask, Chunk, Data, Done, File, Progress, Reply

GATE_LIMIT = 60.0  # seconds a gated task waits before it gives up


def run(text: str, task: dict[str, Any]) -> object:
    verb, _, rest = text.partition(" ")
    if verb == "report":
        words = rest.split()
        return Done(
            "Here is your report.",
            artifacts=[
                Artifact(Data({"words": len(words), "first": words[:1]}), name="counts"),
                Artifact(
                    File(content=rest.upper().encode(), name="shout.txt", media_type="text/plain"),
                    name="shouted",
                ),
            ],
        )
    if verb == "links":
        return Done(
            "Two links.",
            artifacts=[
                Artifact(File(url="https://files.example/report.txt", name="report.txt")),
                Artifact(File(url="javascript:alert(3)", name="trap.txt")),
            ],
        )
    if verb == "ask":
        return Ask("What is your name?")
    if verb == "reply":
        return Reply(f"You said: {rest}")
    if any(message.get("role") == "agent" for message in task.get("history", [])):
        return f"Hello, {text}!"  # the answer to `ask`
    if verb == "gate":
        return _gated(*rest.partition(" ")[::2])
    return f"ran: {text}"


def _gated(name: str, words: str) -> Iterator[object]:
    yield Progress(f"waiting for gate {name}")
    gate = Path(os.environ["CONSOLE_GATES"]) / name
    deadline = time.monotonic() + GATE_LIMIT
    while not gate.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gate {name} never opened")
        time.sleep(0.05)
    yield Chunk("through the gate", artifact="gate", last=True)
    return f"passed gate {name}: {words}"
