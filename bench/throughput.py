"""End-to-end task throughput, beside bare Celery, and horizontal scaling.

    python3 bench/throughput.py [--tasks 2000] [--scale-tasks 200] [--quick]

Starts a private redis-server on a free port (store on db 1, broker on db 2)
and measures, one after the other:

1. End to end: N SendMessage requests over HTTP to the front end (gunicorn
   with gunicorn.conf.py, Redis store, Celery dispatcher) served by ONE
   `celery -A worker worker -c 2` (prefork, echo agent), timed from the
   first send until every task is `completed` (read from the store, so
   polling costs the service nothing). Beside it, bare Celery on the same
   broker with the same worker flags, N tasks each doing one Redis INCR,
   sent with `apply_async`: once with Celery's defaults, once with this
   service's reliability settings (late acks, prefetch 1, ...). The issue's
   aim: >= 0.5x bare Celery.
2. Scaling: a sleep-bound agent (`examples.agents:slow`, 100 ms per task),
   1, 2 and 4 worker processes (separate `celery worker -c 1` instances);
   the aim is >= 3.5x from 1 to 4.

Everything shares one machine, so compare ratios, not absolute numbers.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.web import Gunicorn, rpc_body  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

QUEUE = "bench"
BARE_QUEUE = "bench-bare"
COUNTER = "bench:incr"
SENDERS = 16
WORKER_FLAGS = ("-P", "prefork", "--without-gossip", "--without-mingle", "--without-heartbeat")


# --- bare Celery: `celery -A bench.throughput:bare` (or :bare_reliable) -----------------


def _bare_celery(reliable: bool) -> Any:
    """One task doing one Redis INCR; broker from BENCH_BROKER_URL."""
    import redis
    from celery import Celery

    from shared.settings import Settings
    from worker.celery_app import celery_config

    broker = os.environ["BENCH_BROKER_URL"]
    app = Celery("bench-bare", broker=broker, set_as_current=False)
    app.conf.update(task_ignore_result=True, task_default_queue=BARE_QUEUE)
    if reliable:
        config = celery_config(Settings(broker_url=broker, queue=BARE_QUEUE))
        config.pop("beat_schedule")
        app.conf.update(config)
    clients: dict[int, redis.Redis] = {}

    @app.task(name="bench.incr", shared=False)  # type: ignore[untyped-decorator]
    def incr() -> None:
        client = clients.get(os.getpid())
        if client is None:  # one connection per forked process
            client = clients[os.getpid()] = redis.Redis.from_url(broker)
        client.incr(COUNTER)

    return app


def __getattr__(name: str) -> Any:
    if name in ("bare", "bare_reliable"):
        return _bare_celery(reliable=name == "bare_reliable")
    raise AttributeError(name)


# --- processes ------------------------------------------------------------------------


class CeleryWorker:
    """A `celery -A <app> worker` subprocess, ready once it logged `ready`."""

    def __init__(self, app: str, env: dict[str, str], concurrency: int, name: str) -> None:
        command = [sys.executable, "-m", "celery", "-A", app, "worker", "-n", f"{name}@%h"]
        command += ["-c", str(concurrency), *WORKER_FLAGS, "-l", "INFO"]
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert self.process.stderr is not None
        for line in self.process.stderr:
            if " ready." in line:
                break
        else:
            raise RuntimeError(f"celery {app} exited with {self.process.wait()}")
        # keep draining its log so the pipe never fills and blocks the worker
        threading.Thread(target=self.process.stderr.read, daemon=True).start()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


# --- measurements ---------------------------------------------------------------------


def send_all(port: int, texts: list[str]) -> list[str]:
    """SendMessage each text over HTTP from SENDERS keep-alive connections."""
    ids: list[str | None] = [None] * len(texts)

    def sender(start: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Content-Type": "application/json"}
        for index in range(start, len(texts), SENDERS):
            message = {
                "role": "user",
                "messageId": f"bench-{index}",
                "parts": [{"kind": "text", "text": texts[index]}],
            }
            connection.request("POST", "/", rpc_body("SendMessage", {"message": message}), headers)
            reply = json.loads(connection.getresponse().read())
            ids[index] = reply["result"]["id"]
        connection.close()

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(SENDERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(ids), "some sends failed"
    return [i for i in ids if i]


def wait_completed(store: Any, ids: list[str], timeout: float) -> None:
    """Until every task is completed; checks the oldest pending ones first."""
    pending = list(ids)
    deadline = time.monotonic() + timeout
    while pending:
        batch = pending[:200]
        raws = store.mget([f"toolnexus:task:{i}" for i in batch])
        done = set()
        for task_id, raw in zip(batch, raws, strict=True):
            if raw and b'"state": "completed"' in raw:
                done.add(task_id)
            elif raw and (b'"state": "failed"' in raw):
                raise RuntimeError(f"task {task_id} failed: {raw[:400]!r}")
        pending = [i for i in pending if i not in done]
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} tasks not completed after {timeout:g} s")
        if not done:
            time.sleep(0.02)


def service_rate(env: dict[str, str], texts: list[str], workers: int, concurrency: int) -> float:
    import redis

    store = redis.Redis.from_url(env["TOOLNEXUS_STORE"])
    web = Gunicorn("web:create_app()", env)
    fleet: list[CeleryWorker] = []
    try:
        fleet = [CeleryWorker("worker", env, concurrency, f"bench{n}") for n in range(workers)]
        warm = send_all(web.port, texts[:10])
        wait_completed(store, warm, 60)
        started = time.perf_counter()
        ids = send_all(web.port, texts)
        wait_completed(store, ids, 600)
        return len(ids) / (time.perf_counter() - started)
    finally:
        for worker in fleet:
            worker.stop()
        web.stop()


def bare_rate(app_name: str, broker_url: str, tasks: int) -> float:
    import redis

    os.environ["BENCH_BROKER_URL"] = broker_url
    app = __getattr__(app_name)
    counter = redis.Redis.from_url(broker_url)
    worker = CeleryWorker(f"bench.throughput:{app_name}", {}, 2, app_name)
    try:
        counter.delete(COUNTER)
        for _ in range(50):  # warm up
            app.send_task("bench.incr", queue=BARE_QUEUE)
        while int(counter.get(COUNTER) or 0) < 50:
            time.sleep(0.01)
        counter.delete(COUNTER)
        started = time.perf_counter()
        for _ in range(tasks):
            app.send_task("bench.incr", queue=BARE_QUEUE)
        deadline = time.monotonic() + 600
        while int(counter.get(COUNTER) or 0) < tasks:
            if time.monotonic() > deadline:
                raise TimeoutError("bare Celery did not finish")
            time.sleep(0.005)
        return tasks / (time.perf_counter() - started)
    finally:
        worker.stop()
        app.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000, help="end-to-end tasks (default 2000)")
    parser.add_argument(
        "--scale-tasks", type=int, default=200, help="100 ms tasks per scaling run (default 200)"
    )
    parser.add_argument("--quick", action="store_true", help="300 tasks, 80 per scaling run")
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.scale_tasks = 300, 80
    print(f"{os.cpu_count()} CPUs; worker flags: -c N {' '.join(WORKER_FLAGS)}", flush=True)

    server = RedisServer().start()
    try:
        env = {
            "TOOLNEXUS_STORE": f"{server.url}/1",
            "TOOLNEXUS_BROKER_URL": f"{server.url}/2",
            "TOOLNEXUS_QUEUE": QUEUE,
            "TOOLNEXUS_LOG_LEVEL": "WARNING",
            "TOOLNEXUS_RUN": "examples.agents:echo",
        }
        texts = [f"task {n}" for n in range(args.tasks)]
        ours = service_rate(env, texts, workers=1, concurrency=2)
        bare = bare_rate("bare", f"{server.url}/2", args.tasks)
        reliable = bare_rate("bare_reliable", f"{server.url}/2", args.tasks)
        print(f"\n1. end to end, {args.tasks} tasks, one worker -c 2")
        print(f"   {'bare Celery, defaults (1 INCR)':<44} {bare:>8,.0f} tasks/s")
        print(f"   {'bare Celery, our reliability settings':<44} {reliable:>8,.0f} tasks/s")
        print(
            f"   {'toolnexus: HTTP send -> completed':<44} {ours:>8,.0f} tasks/s"
            f"   {ours / bare:.2f}x bare defaults, {ours / reliable:.2f}x bare reliable"
        )
        print(f"   aim >= 0.5x bare Celery: {'met' if ours >= 0.5 * bare else 'NOT met'}")

        slow = {**env, "TOOLNEXUS_RUN": "examples.agents:slow"}
        sleepy = ["0.1 x"] * args.scale_tasks
        rates = {n: service_rate(slow, sleepy, workers=n, concurrency=1) for n in (1, 2, 4)}
        print(f"\n2. scaling, {args.scale_tasks} tasks of 100 ms, N workers -c 1")
        for workers, rate in rates.items():
            print(f"   {workers} worker(s) {rate:>8,.1f} tasks/s   {rate / rates[1]:.2f}x")
        aim = "met" if rates[4] >= 3.5 * rates[1] else "NOT met"
        print(f"   aim 4 vs 1 >= 3.5x: {aim}")
    finally:
        server.close()


if __name__ == "__main__":
    main()
