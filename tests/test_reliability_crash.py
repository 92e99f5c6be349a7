"""Scenario: Redis (store and broker, append-only) is SIGKILLed and restarted
under send load, cycle after cycle.

Before the waiting index, a fulfil message could be dropped for good when
the claim met the outage and its retry could not be published, leaving a
handed-out task `submitted` for ever. Now every task id handed out ends
terminal: a task whose message was lost is sent again by beat once it has
waited longer than the stale threshold, whatever the broker did.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from shared.redis_store import redis_store
from shared.task import TERMINAL_STATES, state_of
from tests.support.a2a import call, wait_ready
from tests.support.compose import LocalStack, local_stack
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer

SETTINGS = {
    "TOOLNEXUS_RUN": "examples.agents:slow",
    "TOOLNEXUS_CONCURRENCY": "2",
    "TOOLNEXUS_HEARTBEAT": "0.3",
    "TOOLNEXUS_STALE_AFTER": "2",
    "TOOLNEXUS_REAP_EVERY": "0.5",
}
CYCLES = 3
SENDERS = 3


class Senders:
    """Threads sending non-blocking messages; every task id handed out is kept."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ids: list[str] = []
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(SENDERS)]

    def __enter__(self) -> Senders:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            message = {
                "role": "user",
                "messageId": str(uuid.uuid4()),
                "parts": [{"kind": "text", "text": "0.05 load"}],
            }
            params = {"message": message, "configuration": {"blocking": False}}
            try:
                reply = call(self.url, "message/send", params, timeout=10)
            except requests.RequestException:
                self.errors["no reply"] += 1
                continue
            if "result" in reply:
                self.ids.append(reply["result"]["id"])
            else:
                self.errors[reply["error"]["message"].split(":")[0]] += 1


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[RedisServer, LocalStack]]:
    with local_stack(tmp_path, SETTINGS, appendonly=True) as (redis, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("beat")
        for name in ("worker-a", "worker-b"):
            stack.start("worker", as_name=name, args=[f"--hostname={name}@%h"])
        yield redis, stack


def test_no_handed_out_task_stays_submitted_after_redis_crashes(
    stack: tuple[RedisServer, LocalStack],
) -> None:
    redis, services = stack
    wait_ready(services.web_url)
    with Senders(services.web_url) as senders:
        for _ in range(CYCLES):
            before = len(senders.ids)
            wait_for(lambda b=before: len(senders.ids) >= b + 30, timeout=30, what="sends")
            redis.kill()
            time.sleep(1.5)  # the crash itself, with the load still running
            redis.start()
            wait_ready(services.web_url, timeout=30)
    ids = list(senders.ids)
    store = redis_store(services.store_url)

    def unfinished() -> list[str]:
        return [i for i in ids if state_of(store.get(i)) not in TERMINAL_STATES]

    left = unfinished()
    deadline = time.monotonic() + 60
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = unfinished()
    states = Counter(state_of(store.get(i)) for i in ids)
    print(
        f"\ncrash: {CYCLES} Redis SIGKILL cycles, {len(ids)} tasks handed out,"
        f" final states {dict(states)}, refused sends {dict(senders.errors)}"
    )
    assert left == [], {i: state_of(store.get(i)) for i in left[:10]}
    for process in services.processes.values():
        assert process.alive(), f"{process.name} died:\n{process.output()[-2000:]}"
