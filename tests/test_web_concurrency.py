"""One gunicorn process holds many waiting requests at once (gevent): more
blocking sends than it has Redis connections, more than gthread had threads,
all answered, while a fresh client is still served."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from tests.support.a2a import wait_ready
from tests.support.compose import local_stack

SENDS = 300


def test_three_hundred_blocking_sends_on_one_front_end_process(tmp_path: Path) -> None:
    settings = {"TOOLNEXUS_RUN": "examples.agents:slow", "TOOLNEXUS_CONCURRENCY": "8"}
    with local_stack(tmp_path, settings) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("worker", TOOLNEXUS_CONCURRENCY="8")
        stack.start("beat")
        wait_ready(stack.web_url)
        session = requests.Session()
        session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=SENDS))

        def send(n: int) -> str:
            message = {
                "role": "user",
                "messageId": str(uuid.uuid4()),
                "parts": [{"kind": "text", "text": f"0.05 n{n}"}],
            }
            body = {
                "jsonrpc": "2.0",
                "id": n,
                "method": "message/send",
                "params": {"message": message},
            }
            reply = session.post(f"{stack.web_url}/", json=body, timeout=60).json()
            return str(reply["result"]["status"]["state"]) if "result" in reply else str(reply)

        with ThreadPoolExecutor(SENDS) as pool:
            pending = [pool.submit(send, n) for n in range(SENDS)]
            # While they wait, a fresh client still gets answers.
            started = time.monotonic()
            health = requests.get(f"{stack.web_url}/healthz", timeout=10)
            assert health.status_code == 200, time.monotonic() - started
            states = [future.result() for future in pending]
        assert states == ["completed"] * SENDS, [s for s in states if s != "completed"][:5]
