"""Losing a database node under a working fleet: Redis with Sentinel, PostgreSQL with a standby.

The fleet (the front end under gunicorn, two Celery workers, beat) on a
replicated store, and clients that act as real ones do: senders that retry
an unanswered send with the same messageId, streams that resume with
Last-Event-ID, webhooks. Midway the node that takes writes dies:

- Redis: a master, a replica and three Sentinels (`redis-server
  --sentinel`), the store and the broker on `redis+sentinel://` URLs; the
  master is SIGKILLed, Sentinel promotes the replica, and the old master
  comes back (as an orchestrator restarts it), made the new master's
  replica by Sentinel.
- PostgreSQL: a primary and a standby (`pg_basebackup -R`), the store on a
  URL naming both with `target_session_attrs=read-write`, the broker on a
  plain Redis; every process of the primary is SIGKILLed and the standby
  promoted (`pg_ctl promote`, the orchestrator's part).

Where every write is confirmed by a replica (TOOLNEXUS_REDIS_MIN_REPLICAS=1;
PostgreSQL's `synchronous_standby_names`) nothing acknowledged may be lost:
every acknowledged task is found and ends, none runs twice, every stream
reaches the end with its event numbers running on by one except where a
Task marks the gap, and every webhook hears its task end. Without it the
acknowledged tasks the failover lost are counted and printed (replication
is asynchronous: that is the window the setting closes), not asserted.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, Final, Protocol

import pytest
import requests

from shared.store.resolve import resolve_store
from shared.task import TERMINAL_STATES, state_of
from tests.support.a2a import wait_ready
from tests.support.agents import runs_of, scripted_fleet
from tests.support.compose import LocalStack, dotenv_for
from tests.support.polling import wait_for
from tests.support.postgres_pair import PostgresPair
from tests.support.redis_server import RedisServer
from tests.support.sentinel import SentinelGroup
from tests.support.sse import Stream
from tests.support.webhook_receiver import Receiver

pytestmark = [pytest.mark.timeout(420)]

PASSWORD, SENTINEL_PASSWORD = "master-secret", "sentinel-secret"
SENDERS, STREAMERS = 4, 2
BEFORE_KILL = 40  # tasks acknowledged before the master dies
LOAD_BEFORE_KILL = 3.0  # seconds of load, so that streams are under way at the kill
AFTER_FAILOVER = 6.0  # seconds of load once Sentinel has promoted the replica


@dataclass
class Sent:
    text: str
    task_id: str
    hook: str | None


@dataclass
class Load:
    url: str
    receiver: Receiver
    stop: threading.Event = field(default_factory=threading.Event)
    sent: list[Sent] = field(default_factory=list)
    refusals: Counter[str] = field(default_factory=Counter)
    streams: list[list[tuple[int, dict[str, Any]]]] = field(default_factory=list)
    unfinished_streams: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, text: str, hook: str | None) -> Sent | None:
        """One message, retried with its messageId until acknowledged: what a
        client that must not lose its request does; None if never answered."""
        message = {
            "role": "user",
            "messageId": uuid.uuid4().hex,
            "parts": [{"kind": "text", "text": text}],
        }
        configuration: dict[str, Any] = {"blocking": False}
        if hook:
            configuration["pushNotificationConfig"] = {"url": self.receiver.url(hook)}
        params = {"message": message, "configuration": configuration}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": params}
            try:
                reply = requests.post(f"{self.url}/", json=body, timeout=10).json()
            except (requests.RequestException, ValueError) as error:
                self._refused(type(error).__name__)
            else:
                if "result" in reply:
                    return Sent(text, reply["result"]["id"], hook)
                self._refused(str(reply["error"].get("message", ""))[:60])
            time.sleep(0.1)
        return None

    def _refused(self, why: str) -> None:
        with self.lock:
            self.refusals[why] += 1

    def sender(self, index: int) -> None:
        for n in range(10_000):
            if self.stop.is_set():
                return
            hook = f"/hook/{index}/{n}" if n % 4 == 0 else None
            sent = self.send(f"sleep 0.05 s{index}-{n}", hook)
            if sent is not None:
                with self.lock:
                    self.sent.append(sent)

    def streamer(self, index: int) -> None:
        for n in range(10_000):
            if self.stop.is_set():
                return
            self.follow(f"sleep 1 stream{index}-{n}")

    def follow(self, text: str) -> None:
        """message/stream, resumed by tasks/resubscribe with Last-Event-ID
        whenever the stream breaks, until the task ends."""
        message = {
            "role": "user",
            "messageId": uuid.uuid4().hex,
            "parts": [{"kind": "text", "text": text}],
        }
        seen: list[tuple[int, dict[str, Any]]] = []
        task_id: str | None = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if task_id is None:
                    stream = Stream(self.url, "message/stream", {"message": message}, version=None)
                else:
                    last = seen[-1][0] if seen else None
                    stream = Stream(
                        self.url,
                        "tasks/resubscribe",
                        {"id": task_id},
                        version=None,
                        last_event_id=last,
                    )
                if not stream.is_stream:
                    self._refused(
                        "stream: " + str(stream.json().get("error", {}).get("message"))[:50]
                    )
                    time.sleep(0.2)
                    continue
                for event in stream:
                    result = event.data.get("result")
                    if result is None or event.id is None:
                        continue
                    task_id = result.get("taskId") or result.get("id")
                    seen.append((event.id, result))
                    if _ends(result):
                        self._done(seen)
                        return
            except (requests.RequestException, ValueError):
                self._refused("stream broke")
            time.sleep(0.1)
        with self.lock:
            self.unfinished_streams.append(text)
            self.streams.append(seen)

    def _done(self, seen: list[tuple[int, dict[str, Any]]]) -> None:
        with self.lock:
            self.streams.append(seen)


def _ends(result: dict[str, Any]) -> bool:
    state = result.get("status", {}).get("state")
    return bool(result.get("final")) or (result.get("kind") == "task" and state in TERMINAL_STATES)


def silent_gaps(seen: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, int]]:
    """Where a stream's event numbers jump (or go back) without a Task at the jump."""
    return [
        (before, after)
        for (before, _), (after, result) in pairwise(seen)
        if after != before + 1 and result.get("kind") != "task"
    ]


class Cluster(Protocol):
    """A replicated store the fleet runs on, and the fault it survives."""

    confirmed: bool  # every acknowledged write is on a replica
    redis_url: str  # a plain Redis URL the stack is built from (its password)
    store_url: str
    broker_url: str
    settings: dict[str, str]
    failovers_metric: str

    def store(self) -> Any: ...

    def names_first_node(self, node: str) -> bool: ...

    def fail(self) -> Callable[[str], bool]:
        """Kill the node that takes writes and see another take over; what
        names the node that took over."""
        ...

    def close(self) -> None: ...


class SentinelCluster:
    failovers_metric = 'toolnexus_store_failovers_total{store="redis"}'

    def __init__(self, min_replicas: int) -> None:
        self.confirmed = min_replicas > 0
        self.group = SentinelGroup(password=PASSWORD, sentinel_password=SENTINEL_PASSWORD).start()
        self.redis_url = self.group.master.url
        self.store_url = self.group.url.removesuffix("/0") + "/1"
        self.broker_url = self.group.url
        self.settings = {
            "TOOLNEXUS_REDIS_MIN_REPLICAS": str(min_replicas),
            "TOOLNEXUS_SENTINEL_PASSWORD": SENTINEL_PASSWORD,
        }

    def store(self) -> Any:
        return resolve_store(self.store_url, sentinel_password=SENTINEL_PASSWORD)

    def names_first_node(self, node: str) -> bool:
        return f":{self.group.master.port} (master " in node

    def fail(self) -> Callable[[str], bool]:
        self.group.kill_master()
        self.group.rejoin_old_master(self.group.wait_for_failover())
        return self._names_master_now

    def _names_master_now(self, node: str) -> bool:
        """Whether `node` is the master Sentinel names now: on a loaded machine
        a master that misses pings for the down-after time (1 s here) is
        failed over again, to the rejoined node, and that is the node a front
        end must then name."""
        master = self.group.master_address()
        return master is not None and node.startswith(f"{master[0]}:{master[1]} ")

    def close(self) -> None:
        self.group.close()


class PostgresCluster:
    failovers_metric = 'toolnexus_store_failovers_total{store="postgresql"}'

    def __init__(self, synchronous: bool) -> None:
        self.confirmed = synchronous
        self.broker = RedisServer(password=PASSWORD).start()
        self.pair = PostgresPair(synchronous=synchronous).start()
        self.redis_url = self.broker.url
        self.store_url = self.pair.url
        self.broker_url = f"{self.broker.url}/0"
        self.settings: dict[str, str] = {}

    def store(self) -> Any:
        return resolve_store(self.store_url)

    def names_first_node(self, node: str) -> bool:
        return node == f"127.0.0.1:{self.pair.primary_port}"

    def fail(self) -> Callable[[str], bool]:
        self.pair.kill_primary()
        self.pair.promote()
        return lambda node: node == f"127.0.0.1:{self.pair.standby_port}"

    def close(self) -> None:
        self.pair.close()
        self.broker.close()


CLUSTERS: dict[str, Callable[[], Cluster]] = {
    "redis-min-replicas-1": lambda: SentinelCluster(1),
    "redis-asynchronous": lambda: SentinelCluster(0),
    "postgres-synchronous-standby": lambda: PostgresCluster(True),
    "postgres-asynchronous": lambda: PostgresCluster(False),
}


# Without confirmed writes a fleet's failover only counts what it lost; that
# the store follows the promoted node is checked more cheaply by the store-alone
# tests (tests/test_sentinel_store.py, tests/test_failover_postgres.py).
ASYNCHRONOUS: Final = frozenset({"redis-asynchronous", "postgres-asynchronous"})


@pytest.fixture(
    params=[
        pytest.param(name, marks=[pytest.mark.slow] if name in ASYNCHRONOUS else [])
        for name in CLUSTERS
    ]
)
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    made = CLUSTERS[request.param]()
    try:
        yield made
    finally:
        made.close()


def fleet(folder: Path, cluster: Cluster, runs: Path) -> LocalStack:
    settings = {
        # Longer than the failover and the old master's return as a replica
        # (no write is confirmed meanwhile): a result waits that long to be saved.
        **scripted_fleet(runs, stale_after=20),
        **cluster.settings,
    }
    stack = LocalStack(cluster.redis_url, folder, dotenv_for(settings, PASSWORD))
    for environment in stack.environments.values():
        environment["TOOLNEXUS_STORE"] = cluster.store_url
        environment["TOOLNEXUS_BROKER_URL"] = cluster.broker_url
    return stack


def test_a_failover_loses_no_confirmed_task(tmp_path: Path, cluster: Cluster) -> None:
    runs = tmp_path / "runs.log"
    receiver = Receiver().start()
    stack = fleet(tmp_path, cluster, runs)
    try:
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("beat")
        for name in ("worker-a", "worker-b"):
            stack.start("worker", as_name=name, args=[f"--hostname={name}@%h"])
        wait_ready(stack.web_url)
        load = Load(stack.web_url, receiver)
        threads = [threading.Thread(target=load.sender, args=(i,)) for i in range(SENDERS)]
        threads += [threading.Thread(target=load.streamer, args=(i,)) for i in range(STREAMERS)]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        wait_for(
            lambda: len(load.sent) >= BEFORE_KILL and time.monotonic() - started > LOAD_BEFORE_KILL,
            timeout=60,
            what="tasks before the kill",
        )
        acknowledged_before = len(load.sent)
        assert cluster.names_first_node(requests.get(f"{stack.web_url}/readyz").json()["node"])
        killed_at = time.monotonic()
        names_new_node = cluster.fail()
        promoted_after = time.monotonic() - killed_at
        wait_for(
            lambda: len(load.sent) > acknowledged_before, timeout=60, what="a send after the kill"
        )
        first_send_after = time.monotonic() - killed_at
        time.sleep(AFTER_FAILOVER)  # load on the promoted master, for a while
        # Ready again once the old master follows the new one and confirms
        # writes, naming the node it now talks to: the master now.
        wait_for(
            lambda: (
                (r := requests.get(f"{stack.web_url}/readyz")).ok
                and names_new_node(r.json().get("node", ""))
            ),
            timeout=60,
            interval=0.2,
            what="the front end to be ready on the promoted master, and to name it",
        )
        metrics = requests.get(f"{stack.web_url}/metrics").text
        load.stop.set()
        for thread in threads:
            thread.join(120)
        store = cluster.store()

        def ended() -> list[str]:
            return [
                s.task_id
                for s in load.sent
                if (t := store.get(s.task_id)) is None or state_of(t) not in TERMINAL_STATES
            ]

        if cluster.confirmed:
            wait_for(lambda: ended() == [], timeout=120, interval=0.2, what="every task to end")
        tasks = {s.task_id: store.get(s.task_id) for s in load.sent}
        lost = [task_id for task_id, task in tasks.items() if task is None]
        states = Counter(state_of(task) for task in tasks.values() if task is not None)
        twice = {s.text: n for s in load.sent if (n := len(runs_of(str(runs), s.text))) > 1}
        gaps = [gap for seen in load.streams if (gap := silent_gaps(seen))]
        hooked = [s for s in load.sent if s.hook and s.task_id not in lost]

        def unheard() -> list[str]:
            return [
                s.task_id
                for s in hooked
                if not any(
                    hit.body.get("status", {}).get("state") in TERMINAL_STATES
                    or hit.body.get("task", {}).get("status", {}).get("state") in TERMINAL_STATES
                    or hit.body.get("statusUpdate", {}).get("status", {}).get("state")
                    in TERMINAL_STATES
                    for hit in receiver.delivered(s.hook or "")
                )
            ]

        if cluster.confirmed:
            wait_for(
                lambda: unheard() == [],
                timeout=60,
                interval=0.2,
                what="every webhook to hear its task end",
            )
        print(
            f"\nFailover (confirmed writes: {cluster.confirmed}): acknowledged {len(load.sent)},"
            f" lost {len(lost)}, states {dict(states)}, ran twice {len(twice)},"
            f" streams {len(load.streams)} (unfinished {len(load.unfinished_streams)},"
            f" silent gaps {len(gaps)}), webhooks {len(hooked)} (unheard {len(unheard())});"
            f" taken over {promoted_after:.2f} s after the kill, first acknowledged"
            f" send {first_send_after:.2f} s after it; refusals {dict(load.refusals)}"
        )
        # The front end counted the move.
        assert cluster.failovers_metric in metrics
        if not cluster.confirmed:
            return
        assert lost == []
        assert set(states) <= TERMINAL_STATES
        assert twice == {}
        assert gaps == []
        assert load.unfinished_streams == []
        assert len(load.streams) >= STREAMERS
        assert len(load.sent) > acknowledged_before
    except BaseException:
        print(stack.log_tails(80))
        raise
    finally:
        stack.close()
        receiver.stop()
