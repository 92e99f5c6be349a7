"""A worker whose broker connections a partition lost runs tasks again.

A real worker (`toolnexus-serve worker`, prefork) and beat reach their
broker through a `FaultProxy`; the test's own sends go to the broker
directly. The partition loses every open connection of theirs for good,
neither side told, for longer than the worker's event heartbeat (2 s) and
its socket timeouts, so the worker publishes (its heartbeat events) and
waits for messages on connections that will never answer. Once healed, a
task sent then must run: on RabbitMQ a publish waiting for a confirm used
to hold the worker's main loop for good, on Redis a publish with no socket
timeout did, and a consumer's BRPOP had no deadline of its own. In the `reset`
case the fleet's ends of the lost connections are reset once it heals, so
the worker connects again while the broker still holds its old session: on
RabbitMQ the worker's exclusive remote-control queue was still locked to
that session, and the worker exited.

On Redis the server still counts the lost connection's BRPOP as waiting,
and may hand it the next message, which is then lost with the connection:
beat's resend of the task, still `submitted`, is what runs it then.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared import Settings
from shared.broker.dispatch import CeleryDispatcher
from shared.stores.redis.store import redis_store
from shared.task import COMPLETED, new_task, state_of, text_message
from tests.support.fault_proxy import FaultProxy, proxied, proxy_for
from tests.support.polling import wait_for

pytestmark = [pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parent.parent
PARTITION = 8.0  # the fault's length: past the worker's event heartbeat and socket timeouts


@pytest.fixture
def broker(request: pytest.FixtureRequest, kind: str) -> Iterator[tuple[str, FaultProxy]]:
    if kind == "redis":
        url = str(request.getfixturevalue("redis_url")).rsplit("/", 1)[0] + "/2"
        port = 6379
    else:
        url = str(request.getfixturevalue("amqp_broker_url"))
        port = 5672
    with proxy_for(url, port) as proxy:
        yield url, proxy


# How the fleet's ends of the lost connections end: silent (each process
# finds it out by its own deadlines), or reset once the partition heals.
# The silent cases are opt-in (`-m slow`, most of a minute each): every
# history under faults partitions its broker's link the same way, silently,
# and then holds every task sent after the heal to its end
# (tests/test_histories.py on Redis, test_histories_amqp.py on RabbitMQ).
CASES = [
    pytest.param("redis", "silent", marks=pytest.mark.slow, id="redis-silent"),
    pytest.param("amqp", "silent", marks=pytest.mark.slow, id="amqp-silent"),
    pytest.param("amqp", "reset", id="amqp-reset"),
]


@pytest.mark.parametrize(("kind", "ends"), CASES)
def test_a_worker_runs_tasks_again_once_a_partition_of_its_broker_heals(
    broker: tuple[str, FaultProxy], ends: str, redis_url: str, tmp_path: Path
) -> None:
    url, proxy = broker
    queue = f"partition-{uuid.uuid4().hex[:8]}"
    store_url = redis_url.rsplit("/", 1)[0] + "/3"
    store = redis_store(store_url)
    settings = Settings(broker_url=url, store=store_url, queue=queue, push=False)
    dispatcher = CeleryDispatcher(settings)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "TOOLNEXUS_STORE": store_url,
        "TOOLNEXUS_BROKER_URL": proxied(url, proxy.port),
        "TOOLNEXUS_QUEUE": queue,
        "TOOLNEXUS_PUSH": "false",
        "TOOLNEXUS_STATE_DIR": str(tmp_path),
        "TOOLNEXUS_HEARTBEAT": "0.5",
        "TOOLNEXUS_STALE_AFTER": "3",
        "TOOLNEXUS_REAP_EVERY": "1",
    }
    log = (tmp_path / "fleet.log").open("wb")
    fleet = [
        subprocess.Popen(
            [sys.executable, "-m", "worker.cli.main", *role],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for role in (["worker", "--concurrency", "2"], ["beat"])
    ]
    try:

        def ran(text: str) -> str:
            task = store.create(new_task(text_message("user", text))).task
            dispatcher.enqueue(task["id"])
            return str(task["id"])

        def completed(task_id: str) -> bool:
            found = store.get(task_id)
            return found is not None and state_of(found) == COMPLETED

        first = ran("before")
        wait_for(lambda: completed(first), timeout=90, what="a task before the partition")
        proxy.partition()
        time.sleep(PARTITION)
        proxy.heal()
        if ends == "reset":
            # The fleet's own ends given up at once (as their TCP would, in
            # time): they connect again while the broker still holds their
            # old sessions.
            proxy.reset_programs()
        second = ran("after")
        wait_for(lambda: completed(second), timeout=120, what="a task after the partition")
        # The same worker and beat, not ones a supervisor would have started again.
        assert [process.poll() for process in fleet] == [None, None]
    except BaseException:
        log.flush()
        print((tmp_path / "fleet.log").read_text(errors="replace")[-6000:])
        raise
    finally:
        for process in fleet:
            process.terminate()
        for process in fleet:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()
        dispatcher.close()
