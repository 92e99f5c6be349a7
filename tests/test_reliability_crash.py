"""Scenario: the store crashes and comes back under send load, cycle after
cycle: Redis (store and broker, append-only) SIGKILLed and restarted, or,
on the matrix's PostgreSQL store, every connection to it reset and refused
(a proxy cut: the machine's server is shared).

Before the waiting index, a fulfil message could be dropped for good when
the claim met the outage and its retry could not be published, leaving a
handed-out task `submitted` for ever. Now every task the store holds ends
terminal, not only the ids handed out: a task whose message was lost is sent
again by beat once it has waited longer than the stale threshold, whatever
the broker did. Before each crash one task is saved the way the front end
saves it and never queued nor answered (the front end's state when the crash
falls between the save and the publish): only beat's resend can finish it.
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

from shared.task import state_of
from tests.support.a2a import call, wait_ready
from tests.support.compose import Backends
from tests.support.polling import wait_for
from tests.support.settled import saved_without_reply, wait_all_finished
from tests.support.store_outage import StoreOutage, store_outage_stack

# Generous deadlines inside (a loaded machine is slow, not wrong).
# On a RabbitMQ broker (TOOLNEXUS_TEST_MATRIX=full) only the store goes down:
# the store-outage scenario; tests/test_reliability_broker_outage.py takes the broker away.
pytestmark = [pytest.mark.timeout(360), pytest.mark.matrix]

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
def stack(tmp_path: Path, backends: Backends) -> Iterator[StoreOutage]:
    with store_outage_stack(tmp_path, SETTINGS, backends, crash=True) as prepared:
        prepared.stack.start("web", WEB_CONCURRENCY="1")
        prepared.stack.start("beat")
        for name in ("worker-a", "worker-b"):
            prepared.stack.start("worker", as_name=name, args=[f"--hostname={name}@%h"])
        yield prepared


def test_no_handed_out_task_stays_submitted_after_the_store_crashes(stack: StoreOutage) -> None:
    services, store = stack.stack, stack.store
    wait_ready(services.web_url)
    unanswered: list[str] = []
    with Senders(services.web_url) as senders:
        for _ in range(CYCLES):
            before = len(senders.ids)
            wait_for(lambda b=before: len(senders.ids) >= b + 30, timeout=30, what="sends")
            unanswered.append(saved_without_reply(store, "0.05 lost reply"))
            stack.take_away()
            time.sleep(1.5)  # the crash itself, with the load still running
            stack.bring_back()
            wait_ready(services.web_url, timeout=60)
    ids = list(senders.ids)
    final = wait_all_finished(store)
    states = Counter(state_of(task) for task in final.values())
    print(
        f"\ncrash: {CYCLES} cycles of {stack.what} crashing, {len(ids)} tasks handed out,"
        f" {len(final)} stored, final states {dict(states)}, refused sends {dict(senders.errors)}"
    )
    # Nothing handed out (or saved unanswered) was lost with the crash.
    assert set(ids) | set(unanswered) <= set(final)
    for process in services.processes.values():
        assert process.alive(), f"{process.name} died:\n{process.output()[-2000:]}"
