"""The Redis-outage promises of docs/promises.md, checked as written, against
compose's own front end (`toolnexus-serve web`: gunicorn, gevent workers)
and beat on a private Redis (the store on db 1, the broker on db 0) that is
stopped and started again:

- while Redis is down, GetTask, a non-blocking SendMessage and ListTasks,
  each on a fresh connection, get the JSON-RPC error `task store
  unavailable` (-32603) within about the store timeout (2 s); once Redis
  returns, the next send succeeds, with no restart;
- while Redis is paused (SIGSTOP: it accepts connections and never
  answers), the same calls get the same error within three store timeouts
  (6 s: the try and its two retries), and `/healthz` still answers 200;
- `/healthz` stays 200 throughout, while `/readyz` answers 503 naming the
  store, and 200 again once Redis is back.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.a2a import readyz, send_text, wait_ready
from tests.support.compose import LocalStack, local_stack
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer
from web.core.errors import STORE_UNAVAILABLE

pytestmark = pytest.mark.timeout(120)

# A reaper run every second keeps /readyz's beat check (3 x TOOLNEXUS_REAP_EVERY)
# from holding the recovery up for long once Redis is back.
SETTINGS = {"TOOLNEXUS_REAP_EVERY": "1"}
STORE_TIMEOUT = 2.0  # the promise's "about the store timeout (2 s)"
# The deadline asserted: the promised 2 s, plus 1 s for this suite's own
# scheduling on two shared cores (the test, gunicorn's worker and the other
# test processes take turns). A call that waits out its 2 s socket timeout,
# or retries against a Redis that is gone, answers later than this.
DEADLINE = STORE_TIMEOUT + 1.0
# A Redis that accepts and never answers: every try waits out its socket
# timeout, three tries in all (the promise's 6 s), plus the margin for each
# try's wake-up on shared cores.
HUNG_DEADLINE = 3 * STORE_TIMEOUT + 1.5
# How long a request may take before the client gives up: well past the
# deadline, so a late answer is measured and reported rather than cut off.
CLIENT_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, LocalStack]]:
    folder: Path = tmp_path_factory.mktemp("redis-outage")
    with local_stack(folder, SETTINGS, appendonly=True) as (redis, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("beat")
        wait_ready(stack.web_url)
        yield redis, stack


@contextmanager
def redis_down(redis: RedisServer) -> Iterator[None]:
    """Redis stopped for the block, started again after it whatever happens
    (the stack is shared by this module's tests)."""
    redis.stop()
    try:
        yield
    finally:
        redis.start()


@contextmanager
def redis_paused(redis: RedisServer) -> Iterator[None]:
    """Redis stopped by SIGSTOP for the block (a hung host: connections are
    accepted by the kernel, nothing is answered), resumed after it."""
    redis.pause()
    try:
        yield
    finally:
        redis.resume()


def timed_call(url: str, method: str, params: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """One JSON-RPC call on a connection of its own (requests' module-level
    post opens one and closes it): the seconds it took, and its reply."""
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    started = time.monotonic()
    answer = requests.post(f"{url}/", json=body, timeout=CLIENT_TIMEOUT)
    took = time.monotonic() - started
    reply: dict[str, Any] = answer.json()
    assert reply.get("jsonrpc") == "2.0" and reply.get("id") == body["id"], reply
    return took, reply


def message(text: str) -> dict[str, Any]:
    return {
        "role": "user",
        "messageId": str(uuid.uuid4()),
        "parts": [{"kind": "text", "text": text}],
    }


def non_blocking_send(text: str) -> dict[str, Any]:
    return {"message": message(text), "configuration": {"blocking": False}}


def three_calls(known: str, when: str) -> dict[str, dict[str, Any]]:
    """GetTask of a task saved before, a non-blocking send, and a listing."""
    return {
        "GetTask": {"id": known},
        "SendMessage": non_blocking_send(f"during the {when}"),
        "ListTasks": {"pageSize": 10},
    }


def assert_store_errors(answers: dict[str, tuple[float, dict[str, Any]]], deadline: float) -> None:
    """Each answer is `task store unavailable` (-32603), within `deadline` seconds."""
    for method, (took, reply) in answers.items():
        assert "error" in reply, (method, reply)
        assert reply["error"]["code"] == -32603, (method, reply)
        assert reply["error"]["message"].startswith(STORE_UNAVAILABLE), (method, reply)
        assert took <= deadline, f"{method} answered after {took:.2f} s (deadline {deadline} s)"


def test_every_request_gets_a_store_error_within_the_store_timeout_while_redis_is_down(
    served: tuple[RedisServer, LocalStack],
) -> None:
    redis, stack = served
    url = stack.web_url
    known = send_text(url, "before the outage")["id"]
    calls = three_calls(known, "outage")
    with redis_down(redis):
        answers = {method: timed_call(url, method, params) for method, params in calls.items()}
    figures = ", ".join(f"{method} {took:.3f} s" for method, (took, _) in answers.items())
    print(f"\nanswered while Redis was down: {figures} (deadline {DEADLINE} s)")
    assert_store_errors(answers, DEADLINE)
    # Redis is back: the next send succeeds, on the same front end.
    _, reply = timed_call(url, "SendMessage", non_blocking_send("after the outage"))
    assert "result" in reply, reply
    assert reply["result"]["status"]["state"] == "submitted", reply
    assert reply["result"]["id"] != known


def test_healthz_stays_200_while_readyz_names_the_store_during_a_redis_outage(
    served: tuple[RedisServer, LocalStack],
) -> None:
    redis, stack = served
    url = stack.web_url
    assert requests.get(f"{url}/healthz", timeout=CLIENT_TIMEOUT).status_code == 200
    with redis_down(redis):
        healthz = requests.get(f"{url}/healthz", timeout=CLIENT_TIMEOUT)
        ready = requests.get(f"{url}/readyz", timeout=CLIENT_TIMEOUT)
        assert healthz.status_code == 200, healthz.text
        assert healthz.json() == {"status": "ok"}
        assert ready.status_code == 503, ready.text
        assert ready.json()["store"].startswith(STORE_UNAVAILABLE), ready.json()
    # Back: /readyz says 200 once beat has run its reaper again (its record
    # is part of readiness); /healthz never changed.
    wait_for(lambda: readyz(url) == 200, timeout=30, what="/readyz 200 after Redis returned")
    assert requests.get(f"{url}/healthz", timeout=CLIENT_TIMEOUT).status_code == 200


def test_every_request_gets_a_store_error_within_three_store_timeouts_while_redis_hangs(
    served: tuple[RedisServer, LocalStack],
) -> None:
    redis, stack = served
    url = stack.web_url
    known = send_text(url, "before the hang")["id"]
    calls = three_calls(known, "hang")
    with redis_paused(redis):
        answers = {method: timed_call(url, method, params) for method, params in calls.items()}
        started = time.monotonic()
        healthz = requests.get(f"{url}/healthz", timeout=CLIENT_TIMEOUT)
        healthz_took = time.monotonic() - started
    figures = ", ".join(f"{method} {took:.3f} s" for method, (took, _) in answers.items())
    print(f"\nanswered while Redis hung: {figures}, /healthz {healthz_took:.3f} s")
    assert_store_errors(answers, HUNG_DEADLINE)
    assert healthz.status_code == 200, healthz.text
    assert healthz_took <= DEADLINE, f"/healthz took {healthz_took:.2f} s while Redis hung"
    # Resumed: the next send succeeds on the same front end.
    _, reply = timed_call(url, "SendMessage", non_blocking_send("after the hang"))
    assert "result" in reply, reply
    assert reply["result"]["status"]["state"] == "submitted", reply
