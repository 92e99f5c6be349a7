"""Async agents on the embedded server, several at once.

`toolnexus-serve`'s in-process workers are greenlets on one OS thread, and
asyncio runs one event loop per OS thread: each worker running its own loop
failed every async call that overlapped another ("Cannot run the event loop
while another loop is running"). The README's own `countdown` (an async
generator that pauses between chunks) sent four times at once must complete
four times, with nothing of the kind in the log.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from tests.support.embedded import embedded_server

CALLS, PAUSE, STEPS = 4, 0.3, 3


def _send(url: str) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "role": "ROLE_USER",
                "messageId": str(uuid.uuid4()),
                "parts": [{"text": f"{PAUSE} {STEPS}"}],
            }
        },
    }
    reply: dict[str, Any] = requests.post(
        url, json=body, headers={"A2A-Version": "1.0"}, timeout=30
    ).json()
    return reply


def test_async_agents_run_at_once_on_the_embedded_server(tmp_path: Path) -> None:
    env = {"TOOLNEXUS_RUN": "examples.agents:countdown"}
    with embedded_server(tmp_path, env) as (host, port):
        url = f"http://{host}:{port}/"
        with ThreadPoolExecutor(CALLS) as pool:
            replies = list(pool.map(lambda _: _send(url), range(CALLS)))
    log = "".join(path.read_text(errors="replace") for path in tmp_path.glob("*.log"))
    assert "another loop is running" not in log, log[-3000:]
    states = [reply["result"]["task"]["status"]["state"] for reply in replies]
    assert states == ["TASK_STATE_COMPLETED"] * CALLS, replies
    for reply in replies:
        chunks = [
            part["text"]
            for artifact in reply["result"]["task"].get("artifacts", [])
            for part in artifact["parts"]
        ]
        assert "".join(chunks) == "3... 2... 1... liftoff!", reply
