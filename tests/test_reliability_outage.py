"""Scenario: Redis (store and broker) goes down under load, then comes back.

While it is down the front end answers every request with a JSON-RPC error
saying what is unavailable, in bounded time, and /readyz says 503. Within
5 s of Redis returning it serves again. Every task that was handed an id
ends completed, or failed with a reason; none is lost or left working.
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

from shared.redis_store import redis_store
from shared.task import COMPLETED, FAILED, TERMINAL_STATES, state_of
from tests.support.a2a import call, readyz, wait_ready
from tests.support.compose import LocalStack, local_stack
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer

SETTINGS = {
    "TOOLNEXUS_RUN": "examples.agents:slow",
    "TOOLNEXUS_CONCURRENCY": "2",
    "TOOLNEXUS_HEARTBEAT": "0.5",
    "TOOLNEXUS_STALE_AFTER": "8",
    "TOOLNEXUS_REAP_EVERY": "1",
}
OUTAGE = 3.0
CLIENT_TIMEOUT = 15.0  # a request still unanswered by then counts as hung


def succeeded(reply: dict[str, Any] | str) -> bool:
    return isinstance(reply, dict) and "result" in reply


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
    wait_ready(url)
    with Load(url) as load:
        wait_for(lambda: len(load.ids) >= 20, timeout=30, what="tasks under load")
        redis.stop()
        down_from = time.monotonic()
        assert wait_for(lambda: readyz(url) == 503, timeout=10, what="/readyz to say 503")
        time.sleep(OUTAGE)  # the outage itself: load keeps running against it
        down_until = time.monotonic()
        redis.start()
        back_at = time.monotonic()
        wait_for(lambda: readyz(url) == 200, timeout=5, what="/readyz 200 after Redis returned")
        first_ok = wait_for(
            lambda: next(
                (
                    s
                    for s, _, r in load.replies
                    if s > back_at and isinstance(r, dict) and "result" in r
                ),
                None,
            ),
            timeout=5,
            what="a successful request within 5 s of Redis returning",
        )
        sent_before_stop = len(load.ids)
        wait_for(lambda: len(load.ids) > sent_before_stop + 5, timeout=10, what="load to resume")

    # Requests made wholly inside the outage (one still in flight when Redis
    # came back may rightly succeed).
    during = [
        (took, r) for s, took, r in load.replies if down_from + 0.5 < s and s + took < down_until
    ]
    errors = Counter(
        r["error"]["message"].split(":")[0]
        if isinstance(r, dict) and "error" in r
        else repr(r)[:40]
        for _, r in during
    )
    hung = [r for _, r in during if isinstance(r, str)]
    ok = [r for _, r in during if isinstance(r, dict) and "result" in r]
    store = redis_store(services.store_url)
    wait_for(
        lambda: all((t := store.get(i)) and state_of(t) in TERMINAL_STATES for i in load.ids),
        timeout=60,
        what="every handed-out task to end",
    )
    final = {i: store.get(i) for i in load.ids}
    states = Counter(state_of(t) for t in final.values() if t)
    lost = [i for i, t in final.items() if t is None]
    print(
        f"\nredis outage: requests during it {len(during)} (errors {dict(errors)},"
        f" hung {len(hung)}, answered {len(ok)}), slowest error {max(t for t, _ in during):.2f} s,"
        f" serving again {first_ok - back_at:.2f} s after Redis returned;"
        f" tasks handed out {len(load.ids)}, states {dict(states)}, lost {len(lost)}"
    )
    assert during, "no request was made while Redis was down"
    assert hung == []
    assert ok == []
    for _, reply in during:
        assert isinstance(reply, dict)
        message = reply["error"]["message"]
        assert "task store unavailable" in message or "broker unavailable" in message, message
    assert lost == []
    assert set(states) <= {COMPLETED, FAILED}
    for task in final.values():
        if task and state_of(task) == FAILED:
            assert task["status"]["message"]["parts"][0]["text"]
    assert store.stale(float("inf")) == []
