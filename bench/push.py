"""Push delivery: deliveries per second and commit-to-receipt delay.

    python3 bench/push.py [--events 2000] [--latency-events 300] [--runs 2]

One local receiver (a threaded `http.server`, answering 200 at once) and,
in the same run, measured in turn:

* **bare loop**: `http.client` POSTing the same StreamResponse bodies over
  one kept-alive connection, as fast as it goes: the ceiling for one
  sender;
* **one delivery worker**: `worker.push.delivery.deliver` (what the Celery task
  runs) draining a task whose log holds `--events` events, from the memory
  store, through the SSRF-checked client, with the headers, the lease
  renewal and a cursor write per event;
* **commit to receipt**: a delivery following a task (embedded mode's
  PushThread, the same code) while events are committed one at a time,
  each waiting for its receipt; delay from just before the commit to the
  receiver reading it (p50, p99, max).

`--redis` runs the worker and the follower on a private redis-server
(cursor writes, lease renewals and the log's reads then cost round trips).

Aims (issue 22): the worker at least 0.5x the bare loop; p99 under 100 ms.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shared import Settings
from shared.codec import encode_bytes
from shared.dialects import stream_response
from shared.events import artifact_update
from shared.push.contract import PushConfig
from shared.store.contract import Commit
from shared.stores.memory.store import MemoryStore
from shared.task import new_task
from tests.support.shortcuts import push_store
from worker.push.delivery import Policy, PushThread, deliver


class Receiver:
    def __init__(self) -> None:
        self.received: dict[int, float] = {}
        self.arrived = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                now = time.perf_counter()
                event = int(self.headers.get("X-A2A-Event-ID", "0"))
                with receiver.arrived:  # recorded before the answer lets the sender go on
                    receiver.received.setdefault(event, now)
                    receiver.arrived.notify_all()
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, event: int, timeout: float = 10) -> float:
        with self.arrived:
            if not self.arrived.wait_for(lambda: event in self.received, timeout):
                raise TimeoutError(f"event {event} never arrived")
            return self.received[event]


def a_task_with_events(store: Any, count: int) -> str:
    task = new_task(
        {
            "kind": "message",
            "role": "user",
            "messageId": "m",
            "parts": [{"kind": "text", "text": "x"}],
        },
        None,
        None,
    )
    store.create(task)
    for n in range(count - 1):
        commit_one(store, task["id"], n)
    return task["id"]


def commit_one(store: Any, task_id: str, n: int) -> None:
    record = store.read(task_id)
    assert record is not None
    chunk = {"artifactId": "a", "parts": [{"kind": "text", "text": f"chunk {n} " + "x" * 200}]}
    event = artifact_update(record.task, chunk, append=n > 0, last_chunk=False)
    assert store.commit(Commit(record.task, [event], record.seq, snapshot=False))


def hook(task_id: str, receiver: Receiver) -> PushConfig:
    return {
        "id": "bench",
        "taskId": task_id,
        "url": f"http://127.0.0.1:{receiver.port}/hook",
        "token": "t",
        "version": "1.0",
    }


def bare_loop(store: Any, task_id: str, receiver: Receiver) -> float:
    bodies = [encode_bytes(stream_response("1.0", e)) for _, e in store.events(task_id, 0)]
    connection = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
    started = time.perf_counter()
    for n, body in enumerate(bodies, 1):
        headers = {"Content-Type": "application/json", "X-A2A-Event-ID": str(n)}
        connection.request("POST", "/hook", body, headers)
        response = connection.getresponse()
        response.read()
        assert response.status == 200
    elapsed = time.perf_counter() - started
    connection.close()
    return len(bodies) / elapsed


def one_worker(store: Any, task_id: str, receiver: Receiver, settings: Settings) -> float:
    push = push_store(store)
    assert push is not None
    push.put(hook(task_id, receiver), cap=10)
    record = store.read(task_id)
    assert record is not None
    policy = Policy.of(settings)
    started = time.perf_counter()
    # A task at rest (not final) ends the run at `linger`; the clock stops at the last receipt.
    threading.Thread(
        target=deliver, args=(store, push, task_id, "bench", "me", policy), daemon=True
    ).start()
    last = receiver.wait_for(record.seq, timeout=120)
    return record.seq / (last - started)


def commit_to_receipt(
    store: Any, receiver: Receiver, settings: Settings, count: int
) -> list[float]:
    push = push_store(store)
    assert push is not None
    task_id = a_task_with_events(store, 1)
    push.put(hook(task_id, receiver), cap=10)
    deliveries = PushThread(store, push, settings, threads=2).start()
    try:
        receiver.wait_for(1)  # the sweep has handed the feed to a delivery: it follows now
        delays = []
        for n in range(count):
            started = time.perf_counter()
            commit_one(store, task_id, n)
            record = store.read(task_id)
            assert record is not None
            delays.append(receiver.wait_for(record.seq) - started)
        return delays
    finally:
        deliveries.stop()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--latency-events", type=int, default=300)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument(
        "--redis", action="store_true", help="the Redis store (a private redis-server), not memory"
    )
    args = parser.parse_args()
    server = None
    if args.redis:
        from shared.stores.redis.store import redis_store
        from tests.support.redis_server import RedisServer

        server = RedisServer().start()

    def fresh_store() -> Any:
        if server is None:
            return MemoryStore()
        import redis

        redis.Redis.from_url(server.url).flushall()
        return redis_store(server.url)

    # A delivery follows a quiet task for `linger` s; shorter than the default
    # (10 s) only so the run ends sooner: the sweep hands a busy feed on anyway.
    settings = Settings(
        push_allowed_hosts=("127.0.0.1",), push_linger=3, push_sweep=0.05, push_lease=60
    )
    threads = threading.active_count()
    for run in range(1, args.runs + 1):
        receiver = Receiver()
        store = fresh_store()
        task_id = a_task_with_events(store, args.events)
        bare = bare_loop(store, task_id, receiver)
        receiver.received.clear()
        worker = one_worker(store, task_id, receiver, settings)
        receiver.server.shutdown()
        receiver = Receiver()
        delays = commit_to_receipt(fresh_store(), receiver, settings, args.latency_events)
        receiver.server.shutdown()
        ms = [d * 1000 for d in delays]
        print(
            f"run {run}: bare loop {bare:,.0f} POST/s; one delivery worker {worker:,.0f} POST/s"
            f" ({worker / bare:.2f}x, aim >= 0.5x); commit to receipt p50"
            f" {statistics.median(ms):.1f} ms, p99 {quantile(ms, 0.99):.1f} ms,"
            f" max {max(ms):.1f} ms over {len(ms)} events (aim p99 < 100 ms);"
            f" store {'redis' if server else 'memory'}"
        )
    # Let the deliveries still following end before their store goes.
    deadline = time.monotonic() + settings.push_linger + 5
    while threading.active_count() > threads + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    if server is not None:
        server.close()


if __name__ == "__main__":
    main()
