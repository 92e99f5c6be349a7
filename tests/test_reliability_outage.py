"""Scenario: Redis (store and broker) goes down under load, then comes back.

While it is down the front end answers every request with a JSON-RPC error
saying what is unavailable (none hangs), and /readyz says 503. Once Redis
returns it serves again. Every task the store holds, whether or not its id
was handed out, ends completed, or failed with a reason; none is lost or
left working. Redis stays down until the load has had errors back (an
event, not a fixed time), and the deadlines here are generous outcomes, not
timings: how fast the errors come and how soon it serves again are measured
by bench/recovery.py.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from shared.stores.redis.store import redis_store
from shared.task import COMPLETED, FAILED, state_of
from tests.support.a2a import call, readyz, wait_ready
from tests.support.compose import LocalStack, local_stack
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer
from tests.support.settled import saved_without_reply, wait_all_finished

# Generous deadlines inside (a loaded machine is slow, not wrong).
pytestmark = pytest.mark.timeout(360)

SETTINGS = {
    "TOOLNEXUS_RUN": "examples.agents:slow",
    "TOOLNEXUS_CONCURRENCY": "2",
    "TOOLNEXUS_HEARTBEAT": "0.5",
    "TOOLNEXUS_STALE_AFTER": "8",
    "TOOLNEXUS_REAP_EVERY": "1",
}
ERRORS_DURING_OUTAGE = 5  # Redis comes back once the load has had this many
CLIENT_TIMEOUT = 60.0  # a request still unanswered by then counts as hung


def succeeded(reply: dict[str, Any] | str) -> bool:
    return isinstance(reply, dict) and "result" in reply


def error_reply(reply: dict[str, Any] | str) -> bool:
    return isinstance(reply, dict) and "error" in reply


def error_kind(reply: dict[str, Any] | str) -> str:
    if isinstance(reply, dict) and "error" in reply:
        return str(reply["error"]["message"]).split(":")[0]
    return repr(reply)[:40]


class Load:
    """Sends tasks and polls them from a thread, recording every reply."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ids: list[str] = []
        self.replies: list[tuple[float, float, dict[str, Any] | str]] = []  # sent, took, reply
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(CLIENT_TIMEOUT * 2)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            message = {
                "role": "user",
                "messageId": str(uuid.uuid4()),
                "parts": [{"kind": "text", "text": f"0.2 load {n}"}],
            }
            params = {"message": message, "configuration": {"blocking": False}}
            for method, body in (("message/send", params), ("tasks/get", None)):
                if method == "tasks/get":
                    if not self.ids:
                        continue
                    body = {"id": self.ids[-1]}
                started = time.monotonic()
                try:
                    reply: dict[str, Any] | str = call(self.url, method, body, CLIENT_TIMEOUT)
                except requests.RequestException as error:
                    reply = f"no reply: {error}"
                self.replies.append((started, time.monotonic() - started, reply))
                if method == "message/send" and succeeded(reply):
                    self.ids.append(reply["result"]["id"])
            time.sleep(0.02)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[RedisServer, LocalStack]]:
    with local_stack(tmp_path, SETTINGS, appendonly=True) as (redis, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("worker")
        stack.start("beat")
        yield redis, stack


def test_a_redis_outage_gives_clear_errors_and_loses_nothing(
    stack: tuple[RedisServer, LocalStack],
) -> None:
    redis, services = stack
    url = services.web_url
    store = redis_store(services.store_url)
    wait_ready(url)
    with Load(url) as load:
        wait_for(lambda: len(load.ids) >= 20, timeout=60, what="tasks under load")
        unanswered = saved_without_reply(store, "0.2 saved, never answered")
        redis.stop()
        down_from = time.monotonic()
        assert wait_for(lambda: readyz(url) == 503, timeout=60, what="/readyz to say 503")

        def errors_since_down() -> int:
            return sum(1 for s, _, r in list(load.replies) if s > down_from and error_reply(r))

        # The outage itself: the load keeps running against it until it has
        # had errors back, however slowly this machine runs.
        wait_for(
            lambda: errors_since_down() >= ERRORS_DURING_OUTAGE,
            timeout=120,
            what=f"{ERRORS_DURING_OUTAGE} error replies while Redis is down",
        )
        down_until = time.monotonic()
        redis.start()
        back_at = time.monotonic()
        wait_for(lambda: readyz(url) == 200, timeout=60, what="/readyz 200 after Redis returned")
        first_ok = wait_for(
            lambda: next(
                (s for s, _, r in list(load.replies) if s > back_at and succeeded(r)), None
            ),
            timeout=60,
            what="a successful request after Redis returned",
        )
        sent_before_stop = len(load.ids)
        wait_for(lambda: len(load.ids) > sent_before_stop + 5, timeout=60, what="load to resume")

    # Requests made wholly inside the outage (one still in flight when Redis
    # came back may rightly succeed), and every request begun during it.
    during = [
        (took, r) for s, took, r in load.replies if down_from + 0.5 < s and s + took < down_until
    ]
    begun = [r for s, _, r in load.replies if down_from <= s <= back_at]
    errors = Counter(error_kind(r) for _, r in during)
    hung = [r for r in begun if isinstance(r, str)]
    ok = [r for _, r in during if succeeded(r)]
    final = wait_all_finished(store)
    states = Counter(state_of(t) for t in final.values())
    lost = [i for i in [*load.ids, unanswered] if i not in final]
    slowest = max((took for took, _ in during), default=0.0)
    print(
        f"\nredis outage: requests during it {len(during)} (errors {dict(errors)},"
        f" hung {len(hung)}, answered {len(ok)}), slowest error {slowest:.2f} s,"
        f" serving again {first_ok - back_at:.2f} s after Redis returned;"
        f" tasks handed out {len(load.ids)}, stored {len(final)}, states {dict(states)},"
        f" lost {len(lost)} (figures from a shared machine; bench/recovery.py measures them)"
    )
    assert during, "no request was answered while Redis was down"
    assert hung == [], hung[:3]
    assert ok == []
    for _, reply in during:
        assert isinstance(reply, dict)
        message = reply["error"]["message"]
        assert "task store unavailable" in message or "broker unavailable" in message, message
    assert lost == []
    assert set(states) <= {COMPLETED, FAILED}
    for task in final.values():
        if state_of(task) == FAILED:
            assert task["status"]["message"]["parts"][0]["text"]
    assert store.stale(float("inf")) == []
