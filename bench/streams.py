"""Many open event streams on one front-end process, beside the a2a-sdk server.

    python3 bench/streams.py [--streams 1000] [--rate 200] [--seconds 30] [--quick]

Two servers, one after the other, each serving the same N streams of the
same events:

* this service: a private redis-server, gunicorn with the packaged
  web.http.gunicorn_conf and ONE worker process (WEB_CONCURRENCY=1), and Celery
  workers (--celery-workers processes, the asyncio pool, every task
  running at once) running `bench.agents:streamer`; or, with
  `--events-by direct`, no worker: one plain process writes the same
  events through the store (bench/direct_writer.py), so that the front
  end is measured without the workers running every call beside it;
* the official a2a-sdk server (bench/sdk_peer.py): one uvicorn process,
  InMemoryTaskStore, the same plan as an SDK executor.

The client, asyncio and httpx, is spread over processes (--clients, by
default one per 1,000 streams: one process cannot drive 10,000 streams
without its own lag becoming the latency measured); together they open N
SendStreamingMessage streams (A2A 1.0, each a task of its own), and send
what each stream received back to this process. Every task says "ready", and waits; once every
stream has its "ready", the benchmark writes the go file and the tasks emit
their events, `interval` = N / rate seconds apart, spread evenly, so the
server delivers `rate` events per second in total for `seconds` seconds;
each event carries the wall-clock time it was made, just before its save.
Printed for each server: streams open, events delivered (of expected),
streams lost (ended early, with an error, or missing events), delivery
latency (made -> received by the client: p50, p99, max), the serving
process's memory per open stream (RSS before opening and with all open;
the SDK's includes its running tasks, which live in that process), and
GetTask latency (p50, p99) for a fresh client (a new connection each time)
while the streams are open. The client's own event-loop lag is printed too:
latency includes it. For this service also the Redis commands per event
delivered, from the go signal on (XRANGE: the front end's reads of the
logs; the total includes what the scripts call). Aim (issue 20): every
stream open, p99 delivery <= 100 ms at 200 events/s, no stream lost, and
the serving process under 1 GiB, at 1,000 and at 10,000 streams (`--streams
10000`; gunicorn's per-process connection limit is raised to fit); each
check is printed as met or NOT MET. The load average is printed at the
start and the end: on a shared machine it is part of the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import http.client
import json
import math
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import redis

from bench.agents import READY, Plan, stamped
from bench.processes import (
    CeleryWorker,
    Server,
    exit_on_sigterm,
    gunicorn,
    percentile,
    rss_kib,
    uvicorn,
)
from shared.task import epoch
from tests.support.redis_server import RedisServer

A2A_10 = {"A2A-Version": "1.0", "Content-Type": "application/json"}
PROBE_EVERY = 0.1  # seconds between two fresh-client GetTask calls
# One asyncio process cannot drive 10,000 SSE streams fast enough (its own
# loop lag would be the latency measured): the client is spread over processes.
STREAMS_PER_CLIENT = 1000
MEMORY_AIM_KIB = 1024 * 1024  # the serving process under 1 GiB
# Looks for the go file by all waiting tasks together, per second (see Plan.poll).
GO_LOOKS_PER_SECOND = 2000


@dataclass
class Watched:
    """What one stream received."""

    task_id: str = ""
    ready: bool = False
    events: int = 0
    done: bool = False
    problem: str = ""
    latencies: list[float] = field(default_factory=list)
    made: list[float] = field(default_factory=list)  # when each event was made (wall clock)
    saved: list[float] = field(default_factory=list)  # its status timestamp: when it was saved


@dataclass
class Outcome:
    name: str
    streams: list[Watched]
    expected_events: int
    rss_before_kib: int
    rss_open_kib: int
    get_latencies: list[float]
    get_failures: int
    loop_lag: list[float]
    open_seconds: float
    # Redis commands by name, counted from the go signal to the end (ours only)
    redis_calls: dict[str, int] = field(default_factory=dict)
    go_at: float = 0.0  # the wall-clock go time


# --- the client --------------------------------------------------------------------------


def result_of(line: str) -> dict[str, Any] | None:
    """The JSON-RPC result of an SSE `data:` line; raises on a JSON-RPC error."""
    if not line.startswith("data:"):
        return None
    reply = json.loads(line[5:])
    if "error" in reply:
        raise RuntimeError(f"error event: {reply['error']}")
    result: dict[str, Any] = reply["result"]
    return result


def texts_of(status: dict[str, Any]) -> list[str]:
    parts = (status.get("message") or {}).get("parts") or []
    return [part["text"] for part in parts if "text" in part]


async def watch(
    client: httpx.AsyncClient, url: str, plan: Plan, seen: Watched, opening: asyncio.Semaphore
) -> None:
    message = {
        "role": "ROLE_USER",
        "messageId": uuid.uuid4().hex,
        "parts": [{"text": plan.encode()}],
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendStreamingMessage",
        "params": {"message": message},
    }
    try:
        await opening.acquire()
        released = False
        try:
            async with client.stream("POST", url, json=body, headers=A2A_10) as response:
                opening.release()
                released = True
                if response.status_code != 200:
                    raise RuntimeError(f"HTTP {response.status_code}")
                async for line in response.aiter_lines():
                    received = time.time()
                    result = result_of(line)
                    if result is None:
                        continue
                    if "task" in result:
                        seen.task_id = result["task"]["id"]
                        continue
                    status = (result.get("statusUpdate") or {}).get("status")
                    if status is None:
                        continue
                    for text in texts_of(status):
                        if text == READY:
                            seen.ready = True
                        elif (made := stamped(text)) is not None:
                            seen.events += 1
                            seen.latencies.append(received - made[1])
                            seen.made.append(made[1])
                            seen.saved.append(epoch(status["timestamp"]))
                    if status["state"] == "TASK_STATE_COMPLETED":
                        seen.done = True
                        return
                raise RuntimeError("the stream closed before the task completed")
        finally:
            if not released:
                opening.release()
    except Exception as error:
        seen.problem = f"{type(error).__name__}: {error}"


async def loop_lag(samples: list[float], stop: asyncio.Event) -> None:
    """How late this client's event loop wakes up: latency includes it."""
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(0.01)
        samples.append(time.perf_counter() - start - 0.01)


def probe_gets(
    port: int, ids: list[str], since: float, until: float, out: list[float], failures: list[int]
) -> None:
    """GetTask on a random open task, each time on a new connection, from
    `since` to `until` (wall clock)."""
    time.sleep(max(0.0, since - time.time()))
    while time.time() < until and ids:
        body = json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": random.choice(ids)}}
        )
        start = time.perf_counter()
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("POST", "/", body, A2A_10)
            reply = json.loads(connection.getresponse().read())
            connection.close()
            if "result" not in reply:
                raise RuntimeError(str(reply))
            out.append(time.perf_counter() - start)
        except (OSError, RuntimeError, ValueError):
            failures[0] += 1
        time.sleep(PROBE_EVERY)


# --- the client processes ----------------------------------------------------------------


def shard_main(url: str, plans: list[Plan], opening: int, open_timeout: float, conn: Any) -> None:
    """One client process: opens its share of the streams, says how many are
    open, waits for the go (the time to stop waiting for the streams), then
    sends back what each stream received and its event loop's lag."""
    # The client is the instrument: its own full collections (a thousand
    # streams' objects; up to 1.6 s each at 10,000 streams, measured with gc
    # callbacks) would be counted as the server's delivery latency. Its
    # garbage for one run fits in memory, so it collects none.
    gc.freeze()
    gc.disable()
    asyncio.run(_shard(url, plans, opening, open_timeout, conn))


async def _shard(
    url: str, plans: list[Plan], opening_at_once: int, open_timeout: float, conn: Any
) -> None:
    watched = [Watched() for _ in plans]
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    timeout = httpx.Timeout(30.0, read=None)
    lag: list[float] = []
    stop = asyncio.Event()
    lag_task = asyncio.create_task(loop_lag(lag, stop))
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        opening = asyncio.Semaphore(opening_at_once)
        streams = [
            asyncio.create_task(watch(client, url, plan, seen, opening))
            for plan, seen in zip(plans, watched, strict=True)
        ]
        deadline = time.monotonic() + open_timeout
        while time.monotonic() < deadline:
            if all(seen.ready or seen.problem for seen in watched):
                break
            await asyncio.sleep(0.1)
        conn.send([seen.task_id for seen in watched if seen.ready and not seen.problem])
        until = await asyncio.to_thread(conn.recv)
        lag.clear()  # the opening burst is not what the latency is measured in
        await asyncio.wait(streams, timeout=max(0.0, until - time.time()))
        for stream in streams:
            if not stream.done():
                stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
    stop.set()
    await lag_task
    conn.send(([dataclasses.asdict(seen) for seen in watched], lag))
    conn.close()


def client_count(args: argparse.Namespace) -> int:
    """Client processes: --clients, or one per STREAMS_PER_CLIENT streams."""
    given: int = args.clients
    return given or max(1, math.ceil(args.streams / STREAMS_PER_CLIENT))


def drive(
    name: str,
    server: Server,
    args: argparse.Namespace,
    folder: Path,
    at_go: Callable[[], object] | None = None,
) -> Outcome:
    serving = server.workers()
    assert len(serving) == 1, f"{name}: expected one serving process, found {serving}"
    go = folder / f"go-{uuid.uuid4().hex[:8]}"
    interval = args.streams / args.rate
    events = max(1, round(args.seconds / interval))
    plans = [
        Plan(
            events=events,
            interval=interval,
            phase=interval * n / args.streams,
            go=str(go),
            poll=max(0.2, args.streams / GO_LOOKS_PER_SECOND),
        )
        for n in range(args.streams)
    ]
    count = client_count(args)
    shards = [plans[n::count] for n in range(count)]
    rss_before = rss_kib(serving[0])
    # spawn, not fork: the children start clean, whatever this process holds.
    context = multiprocessing.get_context("spawn")
    clients: list[tuple[Any, Any]] = []
    began = time.monotonic()
    try:
        for shard in shards:
            ours, theirs = context.Pipe()
            process = context.Process(
                target=shard_main,
                args=(
                    server.url + "/",
                    shard,
                    max(1, args.opening // count),
                    args.open_timeout,
                    theirs,
                ),
                daemon=True,
            )
            process.start()
            theirs.close()
            clients.append((process, ours))
        task_ids = [
            task_id
            for _, conn in clients
            for task_id in _received(conn, args.open_timeout + 60, f"{name}: a client opening")
        ]
        open_seconds = time.monotonic() - began
        print(
            f"  {name}: {len(task_ids)} of {args.streams} streams open in {open_seconds:.1f} s"
            f" by {count} client processes",
            flush=True,
        )
        rss_open = rss_kib(serving[0])
        start = time.time() + 1.0
        if at_go is not None:
            at_go()
        go.write_text(repr(start))
        get_latencies: list[float] = []
        get_failures = [0]
        prober = threading.Thread(
            target=probe_gets,
            args=(
                server.port,
                task_ids,
                start + 1.0,
                start + args.seconds,
                get_latencies,
                get_failures,
            ),
        )
        prober.start()
        until = start + interval * events + 30.0
        for _, conn in clients:
            conn.send(until)
        watched: list[Watched] = []
        lag: list[float] = []
        for _, conn in clients:
            seen, lags = _received(conn, until - time.time() + 60, f"{name}: a client's results")
            watched += [Watched(**fields) for fields in seen]
            lag += lags
        prober.join()
    finally:
        for process, conn in clients:
            conn.close()
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
    return Outcome(
        name,
        watched,
        events,
        rss_before,
        rss_open,
        get_latencies,
        get_failures[0],
        lag,
        open_seconds,
        go_at=start,
    )


def _received(conn: Any, timeout: float, what: str) -> Any:
    if not conn.poll(max(timeout, 1.0)):
        raise RuntimeError(f"{what}: nothing within {timeout:.0f} s")
    return conn.recv()


# --- the servers -------------------------------------------------------------------------


def run_ours(args: argparse.Namespace, folder: Path) -> Outcome:
    redis_server = RedisServer().start()
    workers: list[CeleryWorker] = []
    writer: subprocess.Popen[bytes] | None = None
    web: Server | None = None
    try:
        env = {
            "TOOLNEXUS_STORE": f"{redis_server.url}/1",
            "TOOLNEXUS_BROKER_URL": f"{redis_server.url}/2",
            "TOOLNEXUS_QUEUE": "bench-streams",
            "TOOLNEXUS_LOG_LEVEL": "WARNING",
            "TOOLNEXUS_RUN": "bench.agents:streamer",
            "TOOLNEXUS_TIME_LIMIT": "3600",
            "WEB_CONCURRENCY": "1",
        }
        if args.events_by == "celery":
            # Every task runs at once: the asyncio pool (one loop per worker process).
            env["TOOLNEXUS_POOL"] = "asyncio"
            env["TOOLNEXUS_CONCURRENCY"] = str(math.ceil(args.streams / args.celery_workers) + 10)
            flags = ("--without-gossip", "--without-mingle")
            for n in range(args.celery_workers):
                workers.append(CeleryWorker("worker", env, f"streams{n}", flags))
        else:
            writer = subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).with_name("direct_writer.py")),
                    env["TOOLNEXUS_STORE"],
                ]
            )
        # web.http.gunicorn_conf allows 4,096 connections per process; one process
        # keeping every stream open needs more.
        connections = ("--worker-connections", str(max(4096, args.streams + 1000)))
        web = gunicorn("web:create_app()", env, "this service, one gunicorn worker", connections)
        stats = redis.Redis(port=redis_server.port)
        outcome = drive("toolnexus", web, args, folder, stats.config_resetstat)
        outcome.redis_calls = {
            name.removeprefix("cmdstat_"): int(entry["calls"])
            for name, entry in stats.info("commandstats").items()
        }
        return outcome
    finally:
        if web is not None:
            web.stop()
        for worker in workers:
            worker.stop()
        if writer is not None:
            writer.terminate()
            writer.wait(10)
        redis_server.close()


def run_sdk(args: argparse.Namespace, folder: Path) -> Outcome:
    peer = uvicorn("bench.sdk_peer:create_app", {"BENCH_SDK_AGENT": "streamer"}, 1, "a2a-sdk")
    try:
        return drive("a2a-sdk", peer, args, folder)
    finally:
        peer.stop()


# --- the report --------------------------------------------------------------------------


WINDOW = 5.0  # seconds of the run per latency window


def print_latency_over_time(outcome: Outcome) -> None:
    """p99 and max delivery latency of the events made in each WINDOW seconds
    after the go: whether the tail is spread over the run or comes at once."""
    windows: dict[int, list[float]] = {}
    for seen in outcome.streams:
        for made, latency in zip(seen.made, seen.latencies, strict=True):
            windows.setdefault(int((made - outcome.go_at) // WINDOW), []).append(latency)
    shown = ", ".join(
        f"{n * WINDOW:g}s: {percentile(v, 0.99) * 1e3:.0f}/{max(v) * 1e3:.0f} ({len(v)})"
        for n, v in sorted(windows.items())
    )
    print(f"  p99/max ms by made    {shown}")
    parts: dict[str, list[float]] = {"made -> saved": [], "saved -> received": []}
    for seen in outcome.streams:
        for made, saved, latency in zip(seen.made, seen.saved, seen.latencies, strict=True):
            parts["made -> saved"].append(saved - made)
            parts["saved -> received"].append(made + latency - saved)
    print(
        "  latency in parts      "
        + "; ".join(
            f"{name} p50 {percentile(v, 0.5) * 1e3:.1f} ms, p99 {percentile(v, 0.99) * 1e3:.1f} ms"
            for name, v in parts.items()
        )
    )


def report(outcome: Outcome, streams: int, rate: float) -> None:
    watched = outcome.streams
    opened = sum(seen.ready for seen in watched)
    delivered = sum(seen.events for seen in watched)
    lost = [seen for seen in watched if not seen.done or seen.events < outcome.expected_events]
    latencies = [value for seen in watched for value in seen.latencies]
    per_stream = (outcome.rss_open_kib - outcome.rss_before_kib) / max(opened, 1)
    gets = outcome.get_latencies
    print(f"\n{outcome.name}")
    print(
        f"  streams open          {opened} of {streams} (opening took {outcome.open_seconds:.1f} s)"
    )
    print(f"  events delivered      {delivered} of {streams * outcome.expected_events}")
    print(f"  streams lost          {len(lost)}")
    for seen in lost[:3]:
        print(
            f"    e.g. task {seen.task_id or '?'}: {seen.events} events,"
            f" {seen.problem or 'incomplete'}"
        )
    print_latency_over_time(outcome)
    print(
        f"  delivery latency      p50 {percentile(latencies, 0.5) * 1e3:.1f} ms,"
        f" p99 {percentile(latencies, 0.99) * 1e3:.1f} ms,"
        f" max {max(latencies, default=float('nan')) * 1e3:.1f} ms"
    )
    print(
        f"  memory per stream     {per_stream:.1f} KiB"
        f" (RSS {outcome.rss_before_kib / 1024:.0f} -> {outcome.rss_open_kib / 1024:.0f} MiB)"
    )
    print(
        f"  fresh GetTask         p50 {percentile(gets, 0.5) * 1e3:.1f} ms,"
        f" p99 {percentile(gets, 0.99) * 1e3:.1f} ms ({len(gets)} calls,"
        f" {outcome.get_failures} failed)"
    )
    print(
        f"  client loop lag       p50 {percentile(outcome.loop_lag, 0.5) * 1e3:.1f} ms,"
        f" p99 {percentile(outcome.loop_lag, 0.99) * 1e3:.1f} ms"
    )
    if outcome.redis_calls:
        calls = outcome.redis_calls
        # Only a front end reads a task's log (XRANGE); a task's hash (HMGET,
        # HGET) is read by both; workers write through scripts (EVALSHA).
        reads = sum(calls.get(name, 0) for name in ("hmget", "hget"))
        print(
            f"  Redis per event       {calls.get('xrange', 0) / max(delivered, 1):.2f} XRANGE"
            f" (front end), {reads / max(delivered, 1):.2f} HMGET/HGET (both),"
            f" {sum(calls.values()) / max(delivered, 1):.2f} commands in all"
        )
        top = sorted(calls.items(), key=lambda item: -item[1])[:6]
        print(
            "  Redis commands most  "
            + ", ".join(f"{name} {count / max(delivered, 1):.1f}" for name, count in top)
        )
    if outcome.name == "toolnexus":
        p99 = percentile(latencies, 0.99)
        checks = [
            (f"{streams} streams open", opened == streams, f"{opened}"),
            ("none lost", not lost, f"{len(lost)} lost"),
            (f"p99 delivery <= 100 ms at {rate:g} events/s", p99 <= 0.1, f"{p99 * 1e3:.1f} ms"),
            (
                "serving process under 1 GiB",
                outcome.rss_open_kib < MEMORY_AIM_KIB,
                f"{outcome.rss_open_kib / 1024:.0f} MiB",
            ),
        ]
        print("  aim:")
        for what, met, measured in checks:
            print(f"    {'met    ' if met else 'NOT MET'}  {what} ({measured})")
        print(f"  aim {'met' if all(met for _, met, _ in checks) else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000, help="open streams (default 1000)")
    parser.add_argument("--rate", type=float, default=200, help="events/s in total (default 200)")
    parser.add_argument("--seconds", type=float, default=30, help="events for (default 30 s)")
    parser.add_argument(
        "--celery-workers", type=int, default=2, help="Celery worker processes (default 2)"
    )
    parser.add_argument(
        "--events-by",
        choices=("celery", "direct"),
        default="celery",
        help="who writes the tasks' events: Celery workers running the streamer agent"
        " (default), or one plain process writing them to the store (bench/direct_writer.py),"
        " which measures the front end without the workers running every call beside it",
    )
    parser.add_argument(
        "--open-timeout", type=float, default=120, help="seconds to open them all (default 120)"
    )
    parser.add_argument(
        "--opening",
        type=int,
        default=100,
        help="streams being opened at once, until their headers arrive (default 100)",
    )
    parser.add_argument(
        "--only", choices=("toolnexus", "sdk"), help="run one server only (no comparison)"
    )
    parser.add_argument(
        "--clients",
        type=int,
        default=0,
        help=f"client processes (default one per {STREAMS_PER_CLIENT} streams)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 100 streams, 20 events/s, 10 s"
    )
    args = parser.parse_args()
    if args.quick:
        args.streams, args.rate, args.seconds = 100, 20.0, 10.0
    exit_on_sigterm()
    interval = args.streams / args.rate
    print(
        f"{args.streams} streams, {args.rate:g} events/s in total (one every {interval:g} s"
        f" per stream) for {args.seconds:g} s; {os.cpu_count()} CPUs;"
        f" {client_count(args)} client processes; events by {args.events_by};"
        f" load average {_load()}",
        flush=True,
    )
    outcomes = []
    with tempfile.TemporaryDirectory() as folder:
        if args.only != "sdk":
            outcomes.append(run_ours(args, Path(folder)))
        if args.only != "toolnexus":
            outcomes.append(run_sdk(args, Path(folder)))
    for outcome in outcomes:
        report(outcome, args.streams, args.rate)
    print(f"\nload average at the end {_load()}")
    if len(outcomes) == 2:
        ours, sdk = outcomes
        ratio = statistics.median(_all(ours)) / statistics.median(_all(sdk))
        print(f"\ndelivery p50, toolnexus / a2a-sdk: {ratio:.2f}x (lower is better)")


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def _all(outcome: Outcome) -> list[float]:
    return [value for seen in outcome.streams for value in seen.latencies] or [float("nan")]


if __name__ == "__main__":
    main()
