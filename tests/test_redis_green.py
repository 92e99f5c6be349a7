"""Pooled Redis connections in a gevent-patched process check readiness with
the OS's poll (`shared.redis_nodes.green`): a reply waiting is still seen and
a connection the server closed still told apart; waits with a timeout still
let other greenlets run."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

from redis._parsers import hiredis as hiredis_parser
from redis.connection import DefaultParser

from shared.redis_nodes.green import check_readiness_off_the_hub

ROOT = Path(__file__).resolve().parent.parent


def test_redis_py_still_checks_readiness_through_the_function_replaced() -> None:
    # The replacement reaches redis-py's hiredis parser through this module
    # function; should it move or be renamed, the replacement does nothing.
    assert DefaultParser is hiredis_parser._HiredisParser
    replaced = hiredis_parser._socket_can_read  # type: ignore[attr-defined]
    assert list(inspect.signature(replaced).parameters) == ["sock", "timeout"]
    assert "_socket_can_read(" in inspect.getsource(hiredis_parser._HiredisParser.can_read)


def test_an_unpatched_process_keeps_redis_py_s_own_check() -> None:
    before = hiredis_parser._socket_can_read  # type: ignore[attr-defined]
    check_readiness_off_the_hub()
    assert hiredis_parser._socket_can_read is before  # type: ignore[attr-defined]


PATCHED = """
from gevent import monkey

monkey.patch_all()

import sys
import time

import gevent
import redis
from redis._parsers import hiredis as hiredis_parser

from shared.redis_nodes.pools import blocking_pool

url = sys.argv[1]
pool = blocking_pool(url, max_connections=1, timeout=5)
assert hiredis_parser._socket_can_read.__qualname__.startswith("readiness_without_hub")
client = redis.Redis(connection_pool=pool)
client.set("kept", "value")

# A reply waiting is seen, and no longer once read.
own = client.client_id()  # the pool's one connection
connection = pool.get_connection()
assert not connection.can_read()
connection.send_command("PING")
deadline = time.monotonic() + 5
while not connection.can_read():
    assert time.monotonic() < deadline, "a waiting reply was not seen"
    time.sleep(0.01)
assert connection.read_response() in (b"PONG", "PONG")
assert not connection.can_read()

# A connection the server closed is told apart from one with data waiting.
redis.Redis.from_url(url).client_kill_filter(_id=own)
while True:
    try:
        connection.can_read()
    except redis.ConnectionError:
        break
    assert time.monotonic() < deadline, "a closed connection was not noticed"
    time.sleep(0.01)
pool.release(connection)
assert client.get("kept") == b"value"
assert client.client_id() != own

# A wait with a timeout (a quiet subscription) lets other greenlets run.
ticks = []
ticker = gevent.spawn(lambda: [ticks.append(gevent.sleep(0.02)) for _ in range(10)])
subscription = client.pubsub()
subscription.subscribe("quiet")
subscription.get_message(timeout=1)  # the subscribe confirmation
started = time.monotonic()
assert subscription.get_message(timeout=0.5) is None
assert time.monotonic() - started >= 0.4
assert len(ticks) >= 5, ticks
ticker.join()
print("ok")
"""


def test_a_patched_process_tells_what_redis_py_s_check_tells(redis_url: str) -> None:
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PATCHED), redis_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "ok"
