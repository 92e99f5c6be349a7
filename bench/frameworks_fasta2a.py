"""One Pydantic AI agent served by FastA2A and by this service, side by side.

    python3 bench/frameworks_fasta2a.py [--tasks 1000] [--rounds 3] [--clients 16]
                                        [--poll 0.005] [--streams 60] [--workers 2]
                                        [--by-hand] [--quick]

The agent is bench/framework_agent.py's: a `FunctionModel` (offline) writing
a short fixed reply in four streamed deltas. Started at once, each on a free
port, and measured in turn, round after round, the order rotated each round:

  * FastA2A: `fasta2a.pydantic_ai.agent_to_a2a(agent)` under uvicorn (one
    process: its storage and broker are in memory, the agent runs in the
    serving process);
  * this service embedded: `toolnexus-serve` (memory store, in-process
    workers) with `TOOLNEXUS_RUN` naming the agent object;
  * this service on a fleet: `toolnexus-serve web` (gunicorn, the packaged
    configuration) and `--workers` separate `toolnexus-serve worker
    --concurrency 1` processes (two by default), a private redis-server as
    store (db 1) and broker (db 2);
  * the ceiling: the agent in this process, `agent.run` in a loop (and
    `agent.run_stream_events` read delta by delta, the way this service's
    adapter runs it, beside it).

Throughput: `--tasks` tasks a round from `--clients` client threads (a
keep-alive connection each, the same client code for every server), each
sending A2A 0.3 `message/send` (non-blocking, so every server answers at
once) and polling `tasks/get` every `--poll` seconds (5 ms) until the task
is completed, then sending the next; tasks a second from the first send to
the last completion, and the polls a task took: a server that answers more
slowly is polled more, and its polls share its cores with its agent runs.
Each ratio is the median of the per-round ratios.

First streamed chunk: `--streams` A2A 0.3 `message/stream` requests a
server, one at a time, spread over the rounds; the time from the request to
the first artifact update (the agent's first delta), p50 and p99.

`--by-hand` serves bench/framework_agent.py's plain function (the agent's
run written by hand) instead of the agent object; it is also what runs,
said in the output, while `toolnexus.frameworks` does not recognize a
Pydantic AI agent. Everything shares one machine: compare the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import CeleryWorker, Server, exit_on_sigterm, percentile
from tests.support.redis_server import RedisServer

COMMAND = [sys.executable, "-m", "worker.cli.main"]
CLIENTS = 16
POLL_EVERY = 0.005
HEADERS = {"Content-Type": "application/json"}
# Servers that import Pydantic AI start slowly on a loaded machine.
START_TIMEOUT = 90.0
FASTA2A, EMBEDDED, FLEET = "FastA2A", "embedded", "fleet"


# --- the client: the same code against every server -------------------------------------


def message(text: str) -> dict[str, Any]:
    return {
        "kind": "message",
        "role": "user",
        "messageId": uuid.uuid4().hex,
        "parts": [{"kind": "text", "text": text}],
    }


def rpc(method: str, params: dict[str, Any]) -> bytes:
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    return json.dumps(body).encode()


def send_body(text: str) -> bytes:
    # FastA2A requires `acceptedOutputModes` in a configuration; non-blocking,
    # so that every server answers the send at once and the task is polled.
    configuration = {"blocking": False, "acceptedOutputModes": ["text/plain", "application/json"]}
    return rpc("message/send", {"message": message(text), "configuration": configuration})


def answer(connection: http.client.HTTPConnection, body: bytes) -> dict[str, Any]:
    connection.request("POST", "/", body, HEADERS)
    response = connection.getresponse()
    raw = response.read()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {raw[:300]!r}")
    reply: dict[str, Any] = json.loads(raw)
    if "error" in reply:
        raise RuntimeError(f"JSON-RPC error: {reply['error']}")
    return reply


def task_in(result: dict[str, Any]) -> dict[str, Any]:
    """The task a reply carries: a 0.3 server gives it as the result; FastA2A
    wraps a send's task as `{"task": ...}` (A2A 1.0's shape) under 0.3's
    method names too."""
    task: dict[str, Any] = result.get("task", result)
    return task


def state_of(task: dict[str, Any]) -> str:
    state: str = task["status"]["state"]
    if state in ("failed", "canceled", "rejected"):
        raise RuntimeError(f"task {task['id']} ended {state}")
    return state


def one_task(connection: http.client.HTTPConnection, text: str, poll: float) -> int:
    """Send, then poll every `poll` seconds until completed; the polls made."""
    task = task_in(answer(connection, send_body(text))["result"])
    task_id = task["id"]
    polls = 0
    while state_of(task) != "completed":
        time.sleep(poll)
        task = task_in(answer(connection, rpc("tasks/get", {"id": task_id}))["result"])
        polls += 1
    return polls


def rate(port: int, tasks: int, clients: int, poll: float = POLL_EVERY) -> tuple[float, float]:
    """Tasks a second, `clients` threads sending and polling in a closed
    loop, and the polls a task took (a server answering more slowly is
    polled more: its polls are part of the load it serves)."""
    left = iter(range(tasks))
    lock = threading.Lock()
    failures: list[BaseException] = []
    polls: list[int] = []

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            while True:
                with lock:
                    number = next(left, None)
                if number is None or failures:
                    return
                polls.append(one_task(connection, f"question {number}", poll))
        except BaseException as error:
            failures.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=client) for _ in range(min(clients, tasks))]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"a client failed on port {port}: {failures[0]}") from failures[0]
    return tasks / took, sum(polls) / tasks


def is_artifact_update(event: dict[str, Any]) -> bool:
    """An artifact update, in 0.3's shape (`kind`) or FastA2A's (`artifactUpdate`)."""
    result = event.get("result", {})
    return result.get("kind") == "artifact-update" or "artifactUpdate" in result


def first_chunk(connection: http.client.HTTPConnection) -> tuple[float, float]:
    """One `message/stream`: seconds to its first artifact update, and to its end."""
    body = rpc("message/stream", {"message": message("stream, please")})
    started = time.perf_counter()
    connection.request("POST", "/", body, {**HEADERS, "Accept": "text/event-stream"})
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
    chunk_at = None
    while line := response.readline():
        if not line.startswith(b"data:"):
            continue
        event = json.loads(line[5:])
        if "error" in event:
            raise RuntimeError(f"stream error: {event['error']}")
        if chunk_at is None and is_artifact_update(event):
            chunk_at = time.perf_counter()
    ended = time.perf_counter()
    if chunk_at is None:
        raise RuntimeError("the stream ended without an artifact update")
    return chunk_at - started, ended - started


def wait_until_answering(port: int, what: str, timeout: float = 60) -> None:
    """One task through a server, retried until its worker is up."""
    deadline = time.monotonic() + timeout
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("POST", "/", send_body("warm up"), HEADERS)
            sent = connection.getresponse()
            sent.read()
            if sent.status == 200:
                break
        except OSError:
            pass
        finally:
            connection.close()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer within {timeout:g} s")
        time.sleep(0.2)
    rate(port, 20, 4)


# --- the servers -----------------------------------------------------------------------


def agent_target(by_hand: bool) -> str:
    """What TOOLNEXUS_RUN names: the agent itself where this checkout's
    workers load it, else the same run written by hand."""
    from shared.errors import ConfigError
    from shared.settings import Settings
    from worker.engine.agent import load_agent

    itself = "bench.framework_agent:agent"
    if not by_hand:
        try:
            load_agent(Settings.from_env({"TOOLNEXUS_RUN": itself}))
            return itself
        except ConfigError as error:
            print(f"the agent object is not served here ({error}): serving it by hand")
    return "bench.framework_agent:by_hand"


class Servers:
    """FastA2A, the embedded server and the fleet, all running at once."""

    def __init__(self, redis_url: str, run: str, workers: int) -> None:
        self.servers: dict[str, Server] = {}
        self.fleet: list[CeleryWorker] = []
        quiet = {"TOOLNEXUS_LOG_LEVEL": "WARNING", "TOOLNEXUS_RUN": run}
        try:
            self.servers[FASTA2A] = Server(
                "FastA2A under uvicorn",
                [
                    *(sys.executable, "-m", "uvicorn", "--factory"),
                    "bench.framework_agent:fasta2a_app",
                    *("--host", "127.0.0.1", "--port", "{port}"),
                    *("--log-level", "warning", "--no-access-log"),
                ],
                {},
                START_TIMEOUT,
            )
            self.servers[EMBEDDED] = Server(
                "toolnexus-serve, embedded",
                [*COMMAND, "--port", "{port}", "--store", "memory"],
                quiet,
                START_TIMEOUT,
            )
            fleet_env = {
                **quiet,
                "TOOLNEXUS_STORE": f"{redis_url}/1",
                "TOOLNEXUS_BROKER_URL": f"{redis_url}/2",
            }
            self.servers[FLEET] = Server(
                "toolnexus-serve web",
                [*COMMAND, "web", "--host", "127.0.0.1", "--port", "{port}"],
                fleet_env,
                START_TIMEOUT,
            )
            for number in range(workers):
                self.fleet.append(
                    CeleryWorker(
                        "worker",
                        fleet_env,
                        f"fw{number}",
                        ("--concurrency", "1"),
                        command=[*COMMAND, "worker"],
                    )
                )
            for name, server in self.servers.items():
                wait_until_answering(server.port, name)
        except BaseException:
            self.stop()
            raise

    def port(self, name: str) -> int:
        return self.servers[name].port

    def stop(self) -> None:
        for worker in self.fleet:
            worker.stop()
        for server in self.servers.values():
            server.stop()


# --- the ceiling -----------------------------------------------------------------------


def in_process(runs: int) -> dict[str, float]:
    """Runs a second of the agent in this process: `agent.run`, and
    `agent.run_stream_events` read delta by delta (how the adapter runs it)."""
    from bench.framework_agent import agent, text_deltas

    async def plain() -> None:
        for _ in range(runs):
            await agent.run("question")

    async def streamed() -> None:
        for _ in range(runs):
            async with agent.run_stream_events("question") as events:
                async for _delta in text_deltas(events):
                    pass

    rates = {}
    for name, loop in (("agent.run", plain), ("agent.run_stream_events", streamed)):
        started = time.perf_counter()
        asyncio.run(loop())
        rates[name] = runs / (time.perf_counter() - started)
    return rates


# --- the run ---------------------------------------------------------------------------


def rotated(names: list[str], number: int) -> list[str]:
    shift = number % len(names)
    return names[shift:] + names[:shift]


def measure(
    servers: Servers, args: argparse.Namespace
) -> tuple[list[dict[str, float]], dict[str, list[tuple[float, float]]]]:
    """Each round: every server's rate and the ceiling, in a rotated order,
    then its share of the streams."""
    names = [FASTA2A, EMBEDDED, FLEET]
    rounds: list[dict[str, float]] = []
    streams: dict[str, list[tuple[float, float]]] = {name: [] for name in names}

    def run(name: str) -> dict[str, float]:
        if name == "ceiling":
            return in_process(args.tasks)
        found, polls = rate(servers.port(name), args.tasks, args.clients, args.poll)
        return {name: found, f"{name} polls": polls}

    for number in range(args.rounds):
        rates: dict[str, float] = {}
        for name in rotated([*names, "ceiling"], number):
            rates.update(run(name))
        each = args.streams // args.rounds + (number < args.streams % args.rounds)
        for name in rotated(names, number):
            # A connection of its own a round (an idle one is closed by the
            # server meanwhile), opened by a stream that is not counted.
            connection = http.client.HTTPConnection("127.0.0.1", servers.port(name), timeout=60)
            first_chunk(connection)
            streams[name] += [first_chunk(connection) for _ in range(each)]
            connection.close()
        served = ", ".join(
            f"{name} {rates[name]:,.0f} ({rates[name + ' polls']:.1f} polls a task)"
            for name in names
        )
        print(
            f"   round {number + 1}: {served} tasks/s; in process"
            f" {rates['agent.run']:,.0f} (run), {rates['agent.run_stream_events']:,.0f} (events)",
            flush=True,
        )
        rounds.append(rates)
    return rounds, streams


def verdict(ratio: float, aim: float, higher: bool = True) -> str:
    return "met" if (ratio >= aim if higher else ratio <= aim) else "NOT met"


def report(rounds: list[dict[str, float]], streams: dict[str, list[tuple[float, float]]]) -> None:
    def median(name: str) -> float:
        return statistics.median(r[name] for r in rounds)

    def ratio(ours: str, theirs: str) -> float:
        return statistics.median(r[ours] / r[theirs] for r in rounds)

    print(f"\n1. tasks a second, send -> completed (median of {len(rounds)} rounds)")
    for name in (FASTA2A, EMBEDDED, FLEET):
        polls = median(f"{name} polls")
        print(f"   {name:<36} {median(name):>9,.1f}   ({polls:.1f} tasks/get polls a task)")
    for name in ("agent.run", "agent.run_stream_events"):
        print(f"   {name:<36} {median(name):>9,.1f}")
    embedded, fleet = ratio(EMBEDDED, FASTA2A), ratio(FLEET, FASTA2A)
    over_embedded = ratio(FLEET, EMBEDDED)
    print("   ratios (median of the per-round ratios):")
    print(f"   embedded / FastA2A   {embedded:6.2f}x   aim >= 1.5x: {verdict(embedded, 1.5)}")
    print(f"   fleet / FastA2A      {fleet:6.2f}x")
    print(
        f"   fleet / embedded     {over_embedded:6.2f}x   aim >= 1.5x again:"
        f" {verdict(over_embedded, 1.5)}"
    )
    for name in (FASTA2A, EMBEDDED, FLEET):
        share = ratio(name, "agent.run")
        print(f"   {name + ' / agent.run in process':<36} {share:6.2f}x (the ceiling is 1x)")

    print("\n2. message/stream: request -> first artifact update (one stream at a time)")
    p50s = {}
    for name, values in streams.items():
        chunks, ends = [v[0] for v in values], [v[1] for v in values]
        p50s[name] = percentile(chunks, 0.5)
        print(
            f"   {name:<10} first chunk p50 {p50s[name] * 1e3:7.2f} ms"
            f"  p99 {percentile(chunks, 0.99) * 1e3:7.2f} ms;"
            f"  stream's end p50 {percentile(ends, 0.5) * 1e3:7.2f} ms  ({len(values)} streams)"
        )
    for name in (EMBEDDED, FLEET):
        times = p50s[name] / p50s[FASTA2A]
        aim = f"   aim <= 2x: {verdict(times, 2.0, higher=False)}" if name == FLEET else ""
        print(f"   first chunk p50, {name} / FastA2A {times:6.2f}x{aim}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000, help="tasks a round (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--clients", type=int, default=CLIENTS, help=f"default {CLIENTS}")
    parser.add_argument(
        "--streams", type=int, default=60, help="message/stream requests a server (default 60)"
    )
    parser.add_argument(
        "--poll",
        type=float,
        default=POLL_EVERY,
        help=f"seconds between a client's tasks/get polls (default {POLL_EVERY:g})",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="fleet workers, --concurrency 1 each (default 2)"
    )
    parser.add_argument(
        "--by-hand",
        action="store_true",
        help="serve the agent's run written as a plain function, not the agent object",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 2 rounds of 150 tasks, 20 streams"
    )
    args = parser.parse_args()
    exit_on_sigterm()
    if args.quick:
        args.tasks, args.rounds, args.streams = 150, 2, 20
    run = agent_target(args.by_hand)
    print(
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f};"
        f" TOOLNEXUS_RUN={run}; fleet: toolnexus-serve web + {args.workers} x"
        f" toolnexus-serve worker --concurrency 1; {args.clients} clients polling every"
        f" {args.poll * 1e3:g} ms,"
        f" {args.tasks} tasks a round, {args.rounds} rounds",
        flush=True,
    )
    redis = RedisServer().start()
    try:
        servers = Servers(redis.url, run, args.workers)
        try:
            rounds, streams = measure(servers, args)
        finally:
            servers.stop()
    finally:
        redis.close()
    report(rounds, streams)
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
