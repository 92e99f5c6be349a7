"""A hostile client against the default deployment: a flood of blocking sends,
idle connections, slowloris.

    python3 bench/flood.py [--sends 1000] [--idle 300] [--trickle 100] [--seconds 30] [--quick]

Runs compose.yaml's web, worker and beat commands as local processes on a
private redis-server (tests.support.compose.LocalStack: gunicorn with
web.http.gunicorn_conf, one `celery worker` with the file's concurrency, beat),
with the agent `examples.agents:slow` (a 2 s task), then, one after the other:

1. Flood: --sends concurrent blocking SendMessage requests (A2A 1.0), each a
   2 s task, far more than the workers can run within the blocking bound
   (TOOLNEXUS_BLOCKING_TIMEOUT, 30 s by default): every one must still be
   answered (with its task, in whatever state) within that bound. Printed:
   answered, the slowest answer beside the bound, states answered with.
2. Idle: --idle connections that connect and send nothing, each re-opened as
   soon as the server closes it, for --seconds.
3. Slowloris: --trickle connections sending a request header one byte every
   2 s, each re-opened as soon as closed, for --seconds.

During each, a fresh client (a new connection each time, 10 s timeout)
calls GetTask every 0.1 s: p50, p99, max and failures (aim: p99 < 1 s).
For 2 and 3, how the server treats those connections: how many it closed
and after how long (the observed timeout). Also the keep-alive timeout: a
connection left idle after one answered request, until the server closes it.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from bench.processes import exit_on_sigterm, percentile, post_alone
from tests.support.compose import LocalStack, local_stack

A2A_10 = {"A2A-Version": "1.0", "Content-Type": "application/json"}
TRICKLE_EVERY = 2.0  # seconds between two bytes of a slowloris header
PROBE_EVERY = 0.1
PROBE_TIMEOUT = 10.0
SLOW_TASK = "2"  # seconds: examples.agents:slow reads the leading number
# The server's blocking bound starts once it has saved and queued the task;
# the client's clock starts once its request is written, so the allowance
# covers the server reading, saving and queueing it amid the flood.
ALLOWANCE = 2.0


def send_body(text: str) -> dict[str, Any]:
    message = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": [{"text": text}]}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


def call(port: int, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/", json.dumps(body), A2A_10)
        reply: dict[str, Any] = json.loads(connection.getresponse().read())
    finally:
        connection.close()
    if "result" not in reply:
        raise RuntimeError(str(reply))
    return reply["result"]


# --- the fresh client ----------------------------------------------------------------------


@dataclass
class Probe:
    """GetTask every PROBE_EVERY seconds on a new connection, in a thread."""

    port: int
    task_id: str
    latencies: list[float] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    first_failure: str = ""

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": self.task_id}}
        while not self._stop.is_set():
            start = time.perf_counter()
            try:
                call(self.port, body, PROBE_TIMEOUT)
                self.latencies.append(time.perf_counter() - start)
            except (OSError, RuntimeError, ValueError, http.client.HTTPException) as error:
                self.failures[type(error).__name__] += 1
                self.first_failure = self.first_failure or f"{type(error).__name__}: {error}"
            self._stop.wait(PROBE_EVERY)

    def stop(self) -> str:
        self._stop.set()
        self._thread.join()
        values = self.latencies
        failed = ", ".join(f"{n} {kind}" for kind, n in self.failures.items()) or "none"
        p99 = percentile(values, 0.99)
        verdict = "met" if values and p99 < 1.0 and not self.failures else "NOT met"
        return (
            f"fresh GetTask p50 {percentile(values, 0.5) * 1e3:.1f} ms,"
            f" p99 {p99 * 1e3:.1f} ms, max {max(values, default=float('nan')) * 1e3:.1f} ms"
            f" ({len(values)} calls; failed: {failed}); aim p99 < 1 s: {verdict}"
            + (f"\n   first failure: {self.first_failure[:300]}" if self.first_failure else "")
        )


# --- 1. the flood --------------------------------------------------------------------------


async def flood(port: int, sends: int, bound: float) -> list[tuple[float, str]]:
    """(seconds to the answer, the task's state or the failure) per send.

    Each send is a raw HTTP/1.1 request on a connection of its own, timed from
    the moment the request is written: what comes after (the server reading
    it under the flood, saving, queueing, waiting, answering) is the server's
    time, while the client's own work of opening a thousand connections is not.
    """

    async def one(number: int) -> tuple[float, str]:
        body = json.dumps(send_body(f"{SLOW_TASK} flood {number}")).encode()
        start = [time.monotonic()]  # then the moment the request was written
        try:
            answer = await post_alone(
                port, body, A2A_10, bound + 60.0, written=lambda: start.append(time.monotonic())
            )
            reply = json.loads(answer)
        except (OSError, TimeoutError, ValueError) as error:
            return time.monotonic() - start[-1], type(error).__name__
        took = time.monotonic() - start[-1]
        if "result" not in reply:
            error = reply.get("error") or {}
            said = f"{error.get('message')} {error.get('data') or ''}"
            return took, f"error {error.get('code')}: {said}"
        return took, str(reply["result"]["task"]["status"]["state"])

    return await asyncio.gather(*(one(n) for n in range(sends)))


def run_flood(stack: LocalStack, args: argparse.Namespace, probe_task: str, bound: float) -> None:
    print(f"\n1. flood: {args.sends} concurrent blocking sends of a {SLOW_TASK} s task", flush=True)
    probe = Probe(stack.web_port, probe_task)
    answers = asyncio.run(flood(stack.web_port, args.sends, bound))
    probe_line = probe.stop()
    times = [seconds for seconds, _ in answers]
    states = Counter(state for _, state in answers)
    answered = sum(n for state, n in states.items() if state.startswith("TASK_STATE_"))
    slowest = max(times)
    within = answered == args.sends and slowest <= bound + ALLOWANCE
    print(f"   answered with a task   {answered} of {args.sends}")
    for state, count in states.most_common():
        took = [seconds for seconds, answer in answers if answer == state]
        print(f"     {count:>5} after {min(took):4.1f}-{max(took):4.1f} s: {state[:300]}")
    print(
        f"   time to answer         p50 {percentile(times, 0.5):.1f} s,"
        f" p99 {percentile(times, 0.99):.1f} s, max {slowest:.1f} s"
        f" (blocking bound {bound:g} s)"
    )
    print(
        f"   all answered with a task within the bound (+{ALLOWANCE:g} s for the send itself):"
        f" {'met' if within else 'NOT met'}"
    )
    print(f"   {probe_line}")
    if any(state.startswith("error") for state in states):
        print_server_log(stack, "web")


def print_server_log(stack: LocalStack, name: str, most: int = 8) -> None:
    """The server's distinct warnings and errors, so a failure shows its cause."""
    seen: dict[str, None] = {}
    for line in stack.processes[name].output().splitlines():
        if any(word in line.lower() for word in ("warning", "error", "fault", "traceback")):
            seen.setdefault(line.rsplit("]", 1)[-1].strip()[:300], None)
    print(f"   {name} log, distinct warnings and errors ({len(seen)}):")
    for line in list(seen)[:most]:
        print(f"     {line}")


# --- 2 and 3. idle and trickling connections ------------------------------------------------


@dataclass
class Connections:
    opened: int = 0
    refused: int = 0
    lifetimes: list[float] = field(default_factory=list)  # of connections the server closed
    answers: Counter[str] = field(default_factory=Counter)  # what it said before closing


async def keep_open(port: int, trickle: bool, kept: Connections, until: float) -> None:
    """One connection at a time, re-opened as soon as the server closes it."""
    header = b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100_000
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            kept.refused += 1
            await asyncio.sleep(0.1)
            continue
        kept.opened += 1
        opened, sent = time.monotonic(), 0
        try:
            while time.monotonic() < until:
                if trickle:
                    writer.write(header[sent : sent + 1])
                    sent += 1
                    await writer.drain()
                wait = min(TRICKLE_EVERY, until - time.monotonic())
                try:
                    data = await asyncio.wait_for(reader.read(4096), timeout=max(wait, 0.01))
                except TimeoutError:
                    continue
                if data:
                    kept.answers[data.split(b"\r\n", 1)[0].decode(errors="replace")] += 1
                    await reader.read()  # until the server closes it
                kept.lifetimes.append(time.monotonic() - opened)
                break
        except OSError:
            kept.lifetimes.append(time.monotonic() - opened)
        finally:
            writer.close()


async def keeping_open(port: int, count: int, trickle: bool, seconds: float) -> Connections:
    kept = Connections()
    until = time.monotonic() + seconds
    await asyncio.gather(*(keep_open(port, trickle, kept, until) for _ in range(count)))
    return kept


def run_kept_open(
    stack: LocalStack, count: int, trickle: bool, seconds: float, probe_task: str
) -> None:
    what = "slowloris connections (a header byte every 2 s)" if trickle else "idle connections"
    print(f"\n{3 if trickle else 2}. {count} {what}, for {seconds:g} s", flush=True)
    probe = Probe(stack.web_port, probe_task)
    kept = asyncio.run(keeping_open(stack.web_port, count, trickle, seconds))
    probe_line = probe.stop()
    lives = kept.lifetimes
    closed = (
        f"{len(lives)} closed by the server, after p50 {percentile(lives, 0.5):.1f} s"
        f" (min {min(lives):.1f}, max {max(lives):.1f})"
        if lives
        else f"none closed by the server within {seconds:g} s"
    )
    print(f"   connections opened     {kept.opened} ({kept.refused} refused); {closed}")
    if kept.answers:
        print(f"   answered before closing: {dict(kept.answers)}")
    print(f"   {probe_line}")


def keepalive_timeout(port: int, limit: float) -> str:
    """How long the server keeps a connection open after answering a request."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=limit)
    connection.request("GET", "/healthz")
    connection.getresponse().read()
    assert connection.sock is not None
    start = time.monotonic()
    try:
        closed = connection.sock.recv(1) == b""
    except TimeoutError:
        closed = False
    connection.close()
    if not closed:
        return f"still open after {limit:g} s"
    return f"closed after {time.monotonic() - start:.1f} s"


# --- the run -------------------------------------------------------------------------------


def wait_ready(stack: LocalStack, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", stack.web_port, timeout=2)
            connection.request("GET", "/readyz")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    for name, process in stack.processes.items():
        print(f"--- {name} ---\n{process.output()[-2000:]}")
    raise RuntimeError(f"the deployment was not ready within {timeout:g} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=1000, help="blocking sends (default 1000)")
    parser.add_argument("--idle", type=int, default=300, help="idle connections (default 300)")
    parser.add_argument("--trickle", type=int, default=100, help="slowloris connections (100)")
    parser.add_argument("--seconds", type=float, default=30, help="idle/slowloris phases (30 s)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 200 sends, 100 idle, 30 trickling, 10 s"
    )
    args = parser.parse_args()
    exit_on_sigterm()
    if args.quick:
        args.sends, args.idle, args.trickle, args.seconds = 200, 100, 30, 10.0
    overrides = {"TOOLNEXUS_RUN": "examples.agents:slow"}
    with (
        tempfile.TemporaryDirectory() as folder,
        local_stack(Path(folder), overrides) as (_, stack),
    ):
        for name in ("web", "worker", "beat"):
            stack.start(name)
        wait_ready(stack, 90)
        web_env = stack.environments["web"]
        bound = float(web_env.get("TOOLNEXUS_BLOCKING_TIMEOUT") or 30.0)
        workers = os.environ.get("WEB_CONCURRENCY", str(os.cpu_count()))
        print(
            f"default deployment: web.http.gunicorn_conf ({workers} gevent workers),"
            " one Celery worker"
            f" (-c {stack.environments['worker']['TOOLNEXUS_CONCURRENCY']}), beat;"
            f" agent examples.agents:slow",
            flush=True,
        )
        probe_task = call(stack.web_port, send_body("0 probe"), 60)["task"]["id"]
        print(f"keep-alive connection after one request: {keepalive_timeout(stack.web_port, 60)}")
        run_flood(stack, args, probe_task, bound)
        run_kept_open(stack, args.idle, False, args.seconds, probe_task)
        run_kept_open(stack, args.trickle, True, args.seconds, probe_task)


if __name__ == "__main__":
    main()
