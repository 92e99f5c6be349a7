"""A burst of sends through gunicorn queues for the front end's broker
connections (shared.broker.redis_queue) instead of failing: while the broker is up
every send is accepted, and a broker that is down is still answered
"broker unavailable" promptly.

The burst is made repeatable by stalling the broker for 3.5 s (CLIENT PAUSE
WRITE, as a busy or forking Redis stalls; it stands in for the loaded front
end that measured the fault): the first 64 sends hold the 64 pooled
connections waiting for replies (a 2 s socket timeout and one retry carry
them past the stall) and the rest wait for one of them. With the pool wait
at the 1 s connect timeout, as it was, the sends that reached the front end
in the stall's first second were answered "No connection available"
(4 of 256 on the loaded machine; most of a thousand blocking sends in the
benchmark). The store is another server, so only the broker stalls.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from shared.broker.redis_queue import POOL_SIZE
from shared.pooling import POOL_WAIT
from shared.settings import Settings
from tests.support.compose import local_stack
from tests.support.polling import wait_for
from tests.support.redis_server import RedisServer

SENDS = 4 * POOL_SIZE
STALL_MS = 3500
# Well past what a refused connection needs (two connects and a backoff),
# and well short of the pool wait: an outage must not wait that out.
OUTAGE_DEADLINE = 10.0
QUEUE = Settings().queue  # compose leaves the default


@pytest.fixture
def broker(redis_server_url: str) -> Iterator[RedisServer]:
    # redis_server_url: skipped (or failed under CI) where redis-server is missing.
    server = RedisServer().start()
    yield server
    server.close()


def send(session: requests.Session, url: str, n: int, timeout: float = 30) -> str:
    """One non-blocking message/send: the state it was accepted in, or the error's words."""
    message = {
        "role": "user",
        "messageId": str(uuid.uuid4()),
        "parts": [{"kind": "text", "text": f"burst {n}"}],
    }
    body = {
        "jsonrpc": "2.0",
        "id": n,
        "method": "message/send",
        "params": {"message": message, "configuration": {"blocking": False}},
    }
    reply: dict[str, Any] = session.post(f"{url}/", json=body, timeout=timeout).json()
    if "result" in reply:
        return str(reply["result"]["status"]["state"])
    return str(reply["error"]["message"])


def test_a_burst_waits_for_broker_connections_and_an_outage_still_fails_fast(
    tmp_path: Path, broker: RedisServer
) -> None:
    # Every send publishes at once (no turns): the burst's subject is the
    # publish path's connections; with fair turns and no worker, all but one
    # task would wait in the turn book instead (tests/test_fair_share.py).
    settings = {"TOOLNEXUS_RUN": "examples.agents:slow", "TOOLNEXUS_FAIR_SHARE": "false"}
    with local_stack(tmp_path, settings) as (_, stack):
        web = stack.start("web", WEB_CONCURRENCY="1", TOOLNEXUS_BROKER_URL=broker.url)
        session = requests.Session()
        session.mount("http://", requests.adapters.HTTPAdapter(pool_maxsize=SENDS))

        def accepting() -> bool:
            try:
                return send(session, stack.web_url, -1) == "submitted"
            except requests.ConnectionError:  # not listening yet
                return False

        wait_for(
            accepting,
            timeout=90,  # a start-up deadline, as main's other server tests (overloads)
            what=f"the front end to accept a send\n{web.output()[-3000:]}",
        )
        queue = redis.Redis.from_url(broker.url)
        queued_before = queue.llen(QUEUE)

        # Every client thread started and waiting first: a loaded machine
        # takes seconds to start a few hundred threads, and the burst must
        # reach the front end while the broker stalls.
        ready = threading.Barrier(SENDS + 1)

        def burst(n: int) -> str:
            ready.wait(60)
            return send(session, stack.web_url, n)

        with ThreadPoolExecutor(SENDS) as pool:
            futures = [pool.submit(burst, n) for n in range(SENDS)]
            ready.wait(60)
            queue.client_pause(STALL_MS, all=False)  # writes (LPUSH, PUBLISH) wait
            answers = Counter(future.result() for future in futures)
        assert answers == {"submitted": SENDS}, answers
        queued = queue.llen(QUEUE)
        # At least once each: a send whose reply the stall delayed past the
        # socket timeout is retried, and the stalled copy is queued too
        # (harmless: only one delivery claims the task).
        assert queued - queued_before >= SENDS

        # A broker that is down: every send is answered, and says so, within
        # a deadline under half the pool wait (a refused connection goes
        # back to the pool at once, so nobody waits for one).
        assert OUTAGE_DEADLINE < POOL_WAIT / 2
        broker.kill()

        def refused(n: int) -> str:
            return send(session, stack.web_url, n, timeout=OUTAGE_DEADLINE)

        with ThreadPoolExecutor(POOL_SIZE) as pool:
            failures = Counter(pool.map(refused, range(POOL_SIZE)))
        assert failures == {"broker unavailable": POOL_SIZE}, failures
