"""End-to-end task throughput and latency, beside bare Celery, and horizontal scaling.

    python3 bench/throughput.py [--tasks 2000] [--rounds 3] [--latency-tasks 1000]
                                [--scale-tasks 200] [--quick]
                                [--broker amqp://...] [--store URL]

Starts a private redis-server on a free port (store on db 1, broker on db 2,
bare Celery's counters on db 3; --broker and --store put either elsewhere,
e.g. a RabbitMQ virtual host of its own, which bare Celery then shares)
and measures, one after the other:

1. Throughput: N SendMessage requests over HTTP to the front end (gunicorn
   with web.http.gunicorn_conf, Redis store, Celery dispatcher) served by ONE
   `celery -A worker worker -c 2` (prefork, echo agent), timed from the
   first send until every task is `completed` (read from the store, a few
   of the oldest pending every 5 ms, as bare Celery's counter is read, so
   polling costs the service next to nothing). Beside it, bare Celery on the same
   broker with the same worker flags, N tasks each doing one Redis INCR,
   sent with `apply_async`: once with Celery's defaults, once with this
   service's reliability settings (late acks, prefetch 1, events, ...).
   All three run at once, each on its own queue, and are measured in turn
   for several rounds (the order rotated each round); each ratio is the
   median of the per-round ratios, since the same run varies by more than
   15% from one minute to the next on a shared machine. The issue's aims:
   >= 0.8x bare Celery with the same settings, >= 0.5x with Celery's
   defaults.
2. Latency: tasks sent at a steady pace of half the saturated rate found in
   1 (open loop: a send never waits for an earlier one), p50 and p99
   from just before the send to the task's `completed` status timestamp
   (written by the worker). Beside it, bare Celery with the same reliability
   settings at the same pace, from just before `send_task` to the moment
   its task body ran.
3. Scaling: a sleep-bound agent (`examples.agents:slow`, 100 ms per task),
   1, 2 and 4 worker processes (separate `celery worker -c 1` instances);
   the aim is >= 3.5x from 1 to 4.

Every SendMessage carries a fresh messageId (a repeated one is answered
from the first task: the idempotent path). Everything shares one machine,
so compare ratios, not absolute numbers.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import (
    CeleryWorker,
    children,
    cpu_seconds,
    exit_on_sigterm,
    gunicorn,
    percentile,
)
from bench.web import rpc_body
from shared.ops.startup import masked
from tests.support.redis_server import RedisServer

QUEUE = "bench"
BARE_QUEUE = "bench-bare"
COUNTER = "bench:incr"
LATENCIES = "bench:latencies"
ROUNDS = 3
SENDERS = 16
WORKER_FLAGS = ("-P", "prefork", "--without-gossip", "--without-mingle", "--without-heartbeat")


# --- bare Celery: `celery -A bench.throughput:bare` (or :bare_reliable) -----------------


def bare_names(reliable: bool) -> tuple[str, str, str]:
    """The queue, counter and latency list of one bare app: both run at once."""
    suffix = "-reliable" if reliable else ""
    return BARE_QUEUE + suffix, COUNTER + suffix, LATENCIES + suffix


def _bare_celery(reliable: bool) -> Any:
    """One task doing one Redis INCR (and, when given its send time, recording
    its latency); broker from BENCH_BROKER_URL, counters in the Redis at
    BENCH_COUNTER_URL."""
    import redis
    from celery import Celery

    from shared.settings import Settings
    from worker.runtime.app import celery_config

    queue, counter, latencies = bare_names(reliable)
    broker = os.environ["BENCH_BROKER_URL"]
    counters = os.environ["BENCH_COUNTER_URL"]
    app = Celery("bench-bare", broker=broker, set_as_current=False)
    app.conf.update(task_ignore_result=True, task_default_queue=queue)
    if reliable:
        config = celery_config(Settings(broker_url=broker, queue=queue))
        config.pop("beat_schedule")
        app.conf.update(config)
    clients: dict[int, redis.Redis] = {}

    @app.task(name="bench.incr", shared=False)  # type: ignore[untyped-decorator]
    def incr(sent_at: float | None = None) -> None:
        client = clients.get(os.getpid())
        if client is None:  # one connection per forked process
            client = clients[os.getpid()] = redis.Redis.from_url(counters)
        if sent_at is not None:
            client.rpush(latencies, time.time() - sent_at)
        client.incr(counter)

    return app


def __getattr__(name: str) -> Any:
    if name in ("bare", "bare_reliable"):
        return _bare_celery(reliable=name == "bare_reliable")
    raise AttributeError(name)


# --- sending ---------------------------------------------------------------------------


def paced(count: int, rate: float | None, send: Callable[[int], None], senders: int) -> None:
    """`send(i)` for every i from `senders` threads; with a `rate`, send i is
    due at start + i / rate (open loop: a late sender catches up at once)."""
    next_index = iter(range(count))
    lock = threading.Lock()
    started = time.monotonic()

    def sender() -> None:
        while True:
            with lock:
                index = next(next_index, None)
            if index is None:
                return
            if rate is not None:
                time.sleep(max(0.0, started + index / rate - time.monotonic()))
            send(index)

    threads = [threading.Thread(target=sender) for _ in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


Sent = tuple[list[str], list[float]]


def send_all(
    port: int,
    texts: list[str],
    rate: float | None = None,
    *,
    token: str | None = None,
    senders: int = SENDERS,
) -> Sent:
    """SendMessage each text over HTTP (keep-alive connections, one per sender
    thread, each message with a fresh messageId), as the caller whose bearer
    `token` is given; the task ids, and the wall time just before each send."""
    ids: list[str] = [""] * len(texts)
    sent_at = [0.0] * len(texts)
    local = threading.local()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"

    def send(index: int) -> None:
        if not hasattr(local, "connection"):
            local.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        message = {
            "role": "user",
            "messageId": uuid.uuid4().hex,
            "parts": [{"kind": "text", "text": texts[index]}],
        }
        body = rpc_body("SendMessage", {"message": message})
        sent_at[index] = time.time()
        local.connection.request("POST", "/", body, headers)
        reply = json.loads(local.connection.getresponse().read())
        ids[index] = reply["result"]["id"]

    paced(len(texts), rate, send, min(senders, len(texts)))
    assert all(ids), "some sends failed"
    return ids, sent_at


class StoreReader:
    """Any other store (--store): read through its own interface, task by task."""

    def __init__(self, spec: str) -> None:
        from shared.store.resolve import resolve_store

        self.store = resolve_store(spec)

    def states(self, ids: list[str]) -> list[bytes | None]:
        tasks = [self.store.get(task_id) for task_id in ids]
        return [t["status"]["state"].encode() if t else None for t in tasks]

    def completed_at(self, task_id: str) -> float:
        stamp = self.store.get(task_id)["status"]["timestamp"]
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# The Redis commands the benchmark's own polling sends, left out of the
# service's count per task.
POLLED: Counter[str] = Counter()


def states_of(store: Any, ids: list[str]) -> list[bytes | None]:
    if isinstance(store, StoreReader):
        return store.states(ids)
    POLLED["hget"] += len(ids)
    pipe = store.pipeline(transaction=False)
    for task_id in ids:
        pipe.hget(f"toolnexus:task:{task_id}", "state")
    return list(pipe.execute())


# How often the tasks' states are read, and how many of the oldest pending
# at a time: as often as bare Celery's counter is read (`Bare.run`), and
# few enough that the reads cost the shared cores next to nothing, while
# far more tasks a second than any run completes can be seen done.
POLL_EVERY = 0.005
POLL_BATCH = 16


def wait_completed(store: Any, ids: list[str], timeout: float) -> None:
    """Until every task is completed (the Redis store keeps each task's state
    in its hash; another store is asked task by task); checks the oldest
    pending ones, `POLL_BATCH` every `POLL_EVERY` seconds."""
    pending = deque(ids)
    deadline = time.monotonic() + timeout
    while pending:
        batch = [pending.popleft() for _ in range(min(POLL_BATCH, len(pending)))]
        left = []
        for task_id, state in zip(batch, states_of(store, batch), strict=True):
            if state in (b"failed", b"canceled", b"rejected"):
                raise RuntimeError(f"task {task_id} ended {state.decode()}")
            if state != b"completed":
                left.append(task_id)
        pending.extendleft(reversed(left))
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} tasks not completed after {timeout:g} s")
        if pending:
            time.sleep(POLL_EVERY)


def completed_at(store: Any, task_id: str) -> float:
    """The wall time of the task's `completed` status, as the worker stamped it."""
    if isinstance(store, StoreReader):
        return store.completed_at(task_id)
    doc = store.hget(f"toolnexus:task:{task_id}", "doc")
    tail = store.get(f"toolnexus:tail:{task_id}") or b""
    stamps = [json.loads(doc)["status"]]
    stamps += [json.loads(line)["status"] for line in tail.splitlines() if b'"status"' in line]
    stamp = next(s["timestamp"] for s in reversed(stamps) if s["state"] == "completed")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# --- this service ----------------------------------------------------------------------


class Service:
    """gunicorn and `workers` Celery workers (`-c concurrency` each) on one Redis."""

    def __init__(self, env: dict[str, str], workers: int, concurrency: int) -> None:
        import redis

        spec = env["TOOLNEXUS_STORE"]
        redis_store = spec.startswith(("redis://", "rediss://"))
        self.store = redis.Redis.from_url(spec) if redis_store else StoreReader(spec)
        self.web = gunicorn("web:create_app()", env, "this service")
        self.fleet: list[CeleryWorker] = []
        try:
            flags = ("-c", str(concurrency), *WORKER_FLAGS)
            for n in range(workers):
                self.fleet.append(CeleryWorker("worker", env, f"bench{n}", flags))
            warm, _ = send_all(self.web.port, ["warm up"] * 10)
            wait_completed(self.store, warm, 60)
        except BaseException:
            self.stop()
            raise

    def processes(self) -> dict[str, list[int]]:
        """This service's processes by part, for the CPU account."""
        fleet = [worker.process.pid for worker in self.fleet]
        return {
            "front end": [self.web.process.pid, *children(self.web.process.pid)],
            "worker main": fleet,
            "worker pool": [pid for main in fleet for pid in children(main)],
        }

    def rate(self, texts: list[str]) -> float:
        started = time.perf_counter()
        ids, _ = send_all(self.web.port, texts)
        wait_completed(self.store, ids, 600)
        return len(ids) / (time.perf_counter() - started)

    def latencies(self, texts: list[str], rate: float) -> list[float]:
        ids, sent_at = send_all(self.web.port, texts, rate)
        wait_completed(self.store, ids, 600)
        return [completed_at(self.store, i) - t for i, t in zip(ids, sent_at, strict=True)]

    def stop(self) -> None:
        for worker in self.fleet:
            worker.stop()
        self.web.stop()


# --- bare Celery -----------------------------------------------------------------------


class Bare:
    """A bare Celery worker (`-c 2`, same flags) and its app in this process."""

    def __init__(self, app_name: str, broker_url: str, counter_url: str) -> None:
        import redis

        os.environ["BENCH_BROKER_URL"] = broker_url
        os.environ["BENCH_COUNTER_URL"] = counter_url
        self.app = __getattr__(app_name)
        self.queue, self.counted, self.latency_list = bare_names(app_name == "bare_reliable")
        self.counter = redis.Redis.from_url(counter_url)
        flags = ("-c", "2", *WORKER_FLAGS)
        self.worker = CeleryWorker(f"bench.throughput:{app_name}", {}, app_name, flags)
        self.run(50, None)  # warm up

    def run(self, tasks: int, rate: float | None) -> float:
        """Send `tasks` (at `rate`, or all at once); tasks per second until all ran."""
        self.counter.delete(self.counted, self.latency_list)
        started = time.perf_counter()
        if rate is None:
            for _ in range(tasks):
                self.app.send_task("bench.incr", queue=self.queue)
        else:

            def send(_: int) -> None:
                self.app.send_task("bench.incr", args=[time.time()], queue=self.queue)

            paced(tasks, rate, send, 1)
        deadline = time.monotonic() + 600
        while int(self.counter.get(self.counted) or 0) < tasks:
            if time.monotonic() > deadline:
                raise TimeoutError("bare Celery did not finish")
            time.sleep(0.005)
        return tasks / (time.perf_counter() - started)

    def latencies(self) -> list[float]:
        return [float(value) for value in self.counter.lrange(self.latency_list, 0, -1)]

    def processes(self) -> dict[str, list[int]]:
        main = self.worker.process.pid
        return {"worker main": [main], "worker pool": children(main)}

    def stop(self) -> None:
        self.worker.stop()
        self.app.close()


def interleaved_rates(
    service: Service,
    broker_url: str,
    counter_url: str,
    tasks: int,
    rounds: int,
    redis_pid: int | None,
) -> list[dict[str, float]]:
    """Tasks per second of this service and both bare Celery apps, all three
    running at once and measured in turn, round after round (each round in
    a rotated order), so each round's ratios compare runs made seconds apart
    on the same machine state."""
    bares = {}
    try:
        for name in ("bare", "bare_reliable"):
            bares[name] = Bare(name, broker_url, counter_url)
        runs: dict[str, Callable[[], float]] = {
            "ours": lambda: service.rate([f"task {n}" for n in range(tasks)]),
            "bare": lambda: bares["bare"].run(tasks, None),
            "bare_reliable": lambda: bares["bare_reliable"].run(tasks, None),
        }
        parts: dict[str, dict[str, list[int]]] = {
            "ours": service.processes(),
            **{name: bare.processes() for name, bare in bares.items()},
        }
        for processes in parts.values():
            processes["redis"] = [redis_pid] if redis_pid is not None else []
        order = list(runs)
        found = []
        server = bares["bare"].counter
        for number in range(rounds):
            rates = {}
            for name in order[number % 3 :] + order[: number % 3]:
                before, polled = commands(server), POLLED.copy()
                cpu_before = cpu_by_part(parts[name])
                rates[name] = runs[name]()
                spent = cpu_by_part(parts[name]) - cpu_before
                if number == 0:
                    show_commands(name, commands(server) - before - (POLLED - polled), tasks)
                    show_cpu(name, spent, tasks)
            print(
                f"   round {number + 1}: toolnexus {rates['ours']:,.0f}, bare reliable"
                f" {rates['bare_reliable']:,.0f}, bare defaults {rates['bare']:,.0f} tasks/s",
                flush=True,
            )
            found.append(rates)
        return found
    finally:
        for bare in bares.values():
            bare.stop()


def cpu_by_part(processes: dict[str, list[int]]) -> Counter[str]:
    """CPU seconds used so far by each part's processes, and by this process
    (the client: its sender threads and its polling)."""
    used: Counter[str] = Counter()
    for part, pids in processes.items():
        used[part] = sum(cpu_seconds(pid) for pid in pids)
    times = os.times()
    used["client"] = times.user + times.system
    return used


def show_cpu(name: str, spent: Counter[str], tasks: int) -> None:
    """CPU per task of one run by part: where the machine's two cores went.
    Counted in the kernel's clock ticks (10 ms), so a part's figure is
    exact to about 10 ms over the run."""
    total = sum(spent.values()) * 1e3 / tasks
    each = ", ".join(f"{part} {seconds * 1e3 / tasks:.2f}" for part, seconds in spent.items())
    print(f"   CPU ms per task, {name}: {total:.2f} in all; {each}", flush=True)


def commands(server: Any) -> Counter[str]:
    """The calls of each Redis command the server has answered so far."""
    stats = server.info("commandstats")
    return Counter(
        {name.removeprefix("cmdstat_"): int(entry["calls"]) for name, entry in stats.items()}
    )


def show_commands(name: str, counted: Counter[str], tasks: int) -> None:
    """Redis commands per task of one run: the whole server's, less the
    benchmark's own polling (the idle fleets' polls are in it, a small
    share at these rates)."""
    total = sum(counted.values()) / tasks
    top = ", ".join(f"{command} {calls / tasks:.1f}" for command, calls in counted.most_common(40))
    print(f"   Redis commands per task, {name}: {total:.1f} in all; {top}", flush=True)


def bare_latencies(broker_url: str, counter_url: str, tasks: int, rate: float) -> list[float]:
    bare = Bare("bare_reliable", broker_url, counter_url)
    try:
        bare.run(tasks, rate)
        return bare.latencies()
    finally:
        bare.stop()


# --- the run ---------------------------------------------------------------------------


def show_latencies(name: str, values: list[float]) -> tuple[float, float]:
    p50, p99 = percentile(values, 0.5) * 1e3, percentile(values, 0.99) * 1e3
    print(f"   {name:<44} p50 {p50:>8.1f} ms   p99 {p99:>8.1f} ms   ({len(values)} tasks)")
    return p50, p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tasks", type=int, default=2000, help="throughput tasks a round (default 2000)"
    )
    parser.add_argument(
        "--rounds", type=int, default=ROUNDS, help=f"interleaved rounds (default {ROUNDS})"
    )
    parser.add_argument(
        "--latency-tasks", type=int, default=1000, help="tasks sent at half rate (default 1000)"
    )
    parser.add_argument(
        "--scale-tasks", type=int, default=200, help="100 ms tasks per scaling run (default 200)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 2 rounds of 300 tasks, 200 at half rate, 80 to scale",
    )
    parser.add_argument(
        "--broker", help="broker URL for this service and bare Celery (default: the private Redis)"
    )
    parser.add_argument("--store", help="this service's task store (default: the private Redis)")
    args = parser.parse_args()
    exit_on_sigterm()
    if args.quick:
        args.tasks, args.rounds, args.latency_tasks, args.scale_tasks = 300, 2, 200, 80
    print(f"{os.cpu_count()} CPUs; worker flags: -c N {' '.join(WORKER_FLAGS)}", flush=True)

    server = RedisServer().start()
    try:
        broker = args.broker or f"{server.url}/2"
        counters = f"{server.url}/3"
        env = {
            "TOOLNEXUS_STORE": args.store or f"{server.url}/1",
            "TOOLNEXUS_BROKER_URL": broker,
            "TOOLNEXUS_QUEUE": QUEUE,
            "TOOLNEXUS_LOG_LEVEL": "WARNING",
            "TOOLNEXUS_RUN": "examples.agents:echo",
        }
        print(f"broker {masked(broker)}, store {masked(env['TOOLNEXUS_STORE'])}", flush=True)
        print(f"\n1. throughput, {args.tasks} tasks a round, one worker -c 2", flush=True)
        service = Service(env, workers=1, concurrency=2)
        try:
            redis_pid = server.process.pid if server.process is not None else None
            rounds = interleaved_rates(
                service, broker, counters, args.tasks, args.rounds, redis_pid
            )
            ours = statistics.median(r["ours"] for r in rounds)
            half = ours / 2
            ours_latency = service.latencies(["latency"] * args.latency_tasks, half)
        finally:
            service.stop()
        bare_latency = bare_latencies(broker, counters, args.latency_tasks, half)

        def median_ratio(base: str) -> float:
            return statistics.median(r["ours"] / r[base] for r in rounds)

        reliable, bare = median_ratio("bare_reliable"), median_ratio("bare")
        print(
            f"   median over {len(rounds)} rounds: toolnexus {ours:,.0f} tasks/s;"
            f" {reliable:.2f}x bare reliable, {bare:.2f}x bare defaults (medians of the"
            " per-round ratios)"
        )
        for aim, ratio, what in ((0.8, reliable, "same settings"), (0.5, bare, "defaults")):
            verdict = "met" if ratio >= aim else "NOT met"
            print(f"   aim >= {aim:g}x bare Celery with {what}: {verdict}")

        print(f"\n2. latency at half the saturated rate ({half:,.0f} sends/s, open loop)")
        _, ours_p99 = show_latencies("toolnexus: send -> completed status", ours_latency)
        _, bare_p99 = show_latencies("bare Celery, our settings: send -> ran", bare_latency)
        print(f"   p99 ratio toolnexus / bare Celery: {ours_p99 / bare_p99:.2f}x")

        slow = {**env, "TOOLNEXUS_RUN": "examples.agents:slow"}
        sleepy = ["0.1 x"] * args.scale_tasks
        rates = {}
        for workers in (1, 2, 4):
            fleet = Service(slow, workers=workers, concurrency=1)
            try:
                rates[workers] = fleet.rate(sleepy)
            finally:
                fleet.stop()
        print(f"\n3. scaling, {args.scale_tasks} tasks of 100 ms, N workers -c 1")
        for workers, rate in rates.items():
            print(f"   {workers} worker(s) {rate:>8,.1f} tasks/s   {rate / rates[1]:.2f}x")
        aim = "met" if rates[4] >= 3.5 * rates[1] else "NOT met"
        print(f"   aim 4 vs 1 >= 3.5x: {aim}")
    finally:
        server.close()


if __name__ == "__main__":
    main()
