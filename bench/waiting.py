"""Waiting agents: a thousand calls that each wait 2 s on real I/O, one worker process.

    python3 bench/waiting.py [--tasks 1000] [--seconds 2] [--prefork-tasks 10] [--skip PART ...]

Starts bench/slow_http.py (`GET /wait` answers after --seconds and counts
the calls per task), then runs, one after the other, each on a private
redis-server:

- asyncio: ONE `celery -A worker worker` process with TOOLNEXUS_POOL=asyncio,
  TOOLNEXUS_CONCURRENCY=--tasks, agent `bench.agents:waiting` (an `async
  def` GET on the slow server); the tasks are created and queued as the
  front end does it (store.create, then shared.broker.dispatch's queue), no HTTP;
- asyncio-http: the same behind gunicorn (web.http.gunicorn_conf), the tasks sent
  as blocking SendMessage requests, like the peer's;
- asyncio-64: as asyncio, with the store's pool kept at 64 connections
  (bench/capped_worker.py), to see what sizing it from the concurrency buys;
- threads: TOOLNEXUS_POOL=threads with `bench.agents:waiting_blocking`
  (the same GET with urllib);
- prefork: the default pool at the default concurrency (the CPU count),
  agent `waiting`, with --prefork-tasks tasks, extrapolated to --tasks;
- peer: the official a2a-sdk server (bench/sdk_peer.py, uvicorn, one
  process) running the same GET in its executor, a coroutine per task, sent
  --tasks blocking SendMessage requests (A2A 1.0, a connection each) at once.

Printed: seconds from the first send until the last answer (queued
directly: until the last completion was saved), and until the last
completion was saved; the peak RSS (VmHWM) of the process running the
agents (prefork: summed over its processes; the peer: its one process,
which is its web server too); tasks lost (not completed) and run twice
(the slow server counted more than one call for a task).
Aim (issue 24): 1,000 completed within 10 s by one worker process, under
300 MB, none lost or run twice, not slower than the peer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import urllib.request
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.processes import (
    CeleryWorker,
    Server,
    children,
    exit_on_sigterm,
    gunicorn,
    post_alone,
    uvicorn,
)
from shared.broker.dispatch import CeleryDispatcher
from shared.settings import Settings
from shared.store.wiring import open_store
from shared.task import COMPLETED, Task, epoch, new_task, state_of, text_message
from tests.support.redis_server import RedisServer

A2A_10 = {"A2A-Version": "1.0", "Content-Type": "application/json"}
DONE_1_0 = "TASK_STATE_COMPLETED"
ANSWER_TIMEOUT = 300.0
BLOCKING_AGENT = "bench.agents:waiting_blocking"
SENDERS = 16


@dataclass
class Result:
    name: str
    tasks: int
    answered: float  # seconds from the first send to the last answer
    saved: float | None  # ... to the last completion saved (this service)
    rss_mib: float
    lost: int
    twice: int
    note: str = ""

    def line(self, peer: Result | None) -> str:
        saved = f"{self.saved:7.2f}" if self.saved is not None else "      -"
        ratio = f"{peer.answered / self.answered:5.2f}x" if peer and self is not peer else "    -"
        return (
            f"{self.name:<11} {self.tasks:>6} {self.answered:9.2f} {saved} {self.rss_mib:9.1f}"
            f" {self.lost:>5} {self.twice:>6}  {ratio}  {self.note}"
        )


HEADER = "run          tasks  answered   saved  peak MiB  lost  twice  peer/this"


def send_body(text: str) -> bytes:
    message = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": [{"text": text}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    return json.dumps(body).encode()


async def send_all(port: int, texts: list[str]) -> tuple[float, list[tuple[float, str, str]]]:
    """Send every text at once as a blocking send; (start, [(answered at, task id, state)])."""

    async def one(text: str) -> tuple[float, str, str]:
        try:
            reply = json.loads(await post_alone(port, send_body(text), A2A_10, ANSWER_TIMEOUT))
            task = reply["result"]["task"]
            return time.time(), str(task["id"]), str(task["status"]["state"])
        except (OSError, TimeoutError, ValueError, KeyError) as error:
            return time.time(), "", type(error).__name__

    start = time.time()
    answers = await asyncio.gather(*(one(text) for text in texts))
    return start, answers


def peak_rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                total += int(line.split()[1])
    return total / 1024


def counts(slow: Server) -> dict[str, int]:
    with urllib.request.urlopen(f"{slow.url}/counts", timeout=30) as reply:
        counted: dict[str, int] = json.loads(reply.read())
    return counted


def wait_url(slow: Server, seconds: float) -> str:
    return f"{slow.url}/wait?seconds={seconds:g}"


def submit_directly(settings: Mapping[str, str], text: str, tasks: int) -> tuple[float, list[str]]:
    """What the front end does for each send, minus HTTP: create the task,
    queue its message (shared.broker.dispatch's direct Redis queue); SENDERS at a time,
    as concurrent requests would."""
    config = Settings.from_env(settings)
    store, dispatcher = open_store(config), CeleryDispatcher(config)

    def send(_: int) -> str:
        task = store.create(new_task(text_message("user", text))).task
        dispatcher.enqueue(task["id"])
        return str(task["id"])

    start = time.time()
    with ThreadPoolExecutor(SENDERS) as senders:
        ids = list(senders.map(send, range(tasks)))
    dispatcher.close()
    return start, ids


def wait_finished(settings: Mapping[str, str], ids: list[str]) -> list[Task | None]:
    """Every task once none is left submitted or working (the store's indexes)."""
    store = open_store(Settings.from_env(settings))
    deadline = time.monotonic() + ANSWER_TIMEOUT
    while store.stale(float("inf")) or store.waiting(float("inf")):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    return [store.get(task_id) for task_id in ids]


def ours(
    name: str,
    slow: Server,
    args: argparse.Namespace,
    env: Mapping[str, str],
    tasks: int,
    *,
    app: str = "worker",
    via_http: bool = False,
) -> Result:
    redis = RedisServer().start()
    try:
        settings = {
            "TOOLNEXUS_STORE": f"{redis.url}/1",
            "TOOLNEXUS_BROKER_URL": f"{redis.url}/0",
            "TOOLNEXUS_QUEUE": f"bench-waiting-{uuid.uuid4().hex[:6]}",
            "TOOLNEXUS_BLOCKING_TIMEOUT": str(ANSWER_TIMEOUT),
            **env,
        }
        # The front end's per-request log lines would only compete for the CPU.
        web_env = {**settings, "TOOLNEXUS_LOG_LEVEL": "WARNING"}
        web = gunicorn("web:create_app()", web_env, what="gunicorn") if via_http else None
        worker = CeleryWorker(app, settings, name=f"bench-{name}")
        text = wait_url(slow, args.seconds)
        try:
            if web is not None:
                start, answers = asyncio.run(send_all(web.port, [text] * tasks))
                ids = [task_id for _, task_id, _ in answers if task_id]
            else:
                start, ids = submit_directly(settings, text, tasks)
            finished = wait_finished(settings, ids)
            pids = [worker.process.pid, *children(worker.process.pid)]
            rss = peak_rss_mib(pids)
        finally:
            worker.stop()
            if web is not None:
                web.stop()
        saved = [
            epoch(t["status"]["timestamp"]) for t in finished if t and state_of(t) == COMPLETED
        ]
        if web is None:  # no answers: a task's answer is its saved state
            answers = [
                (at, task_id, state_of(t) if t else "lost")
                for task_id, t in zip(ids, finished, strict=True)
                for at in [epoch(t["status"]["timestamp"]) if t else start]
            ]
        how = "via gunicorn, blocking sends" if web is not None else "queued directly"
        return summary(name, slow, start, answers, saved, rss, f"{len(pids)} process(es), {how}")
    finally:
        redis.close()


def peer(slow: Server, args: argparse.Namespace) -> Result:
    env = {"BENCH_SDK_AGENT": "waiting", "BENCH_SDK_URL": "http://127.0.0.1/"}
    server = uvicorn("bench.sdk_peer:create_app", env, workers=1, what="a2a-sdk peer")
    try:
        start, answers = asyncio.run(
            send_all(server.port, [wait_url(slow, args.seconds)] * args.tasks)
        )
        rss = peak_rss_mib(server.workers())
    finally:
        server.stop()
    return summary("peer", slow, start, answers, [], rss, "a2a-sdk, one uvicorn process")


def summary(
    name: str,
    slow: Server,
    start: float,
    answers: list[tuple[float, str, str]],
    saved: list[float],
    rss: float,
    note: str,
) -> Result:
    counted = counts(slow)
    ids = [task_id for _, task_id, _ in answers if task_id]
    lost = sum(1 for _, _, state in answers if state not in (DONE_1_0, COMPLETED))
    return Result(
        name=name,
        tasks=len(answers),
        answered=max(at for at, _, _ in answers) - start,
        saved=max(saved) - start if saved else None,
        rss_mib=rss,
        lost=lost,
        twice=sum(1 for task_id in ids if counted.get(task_id, 0) > 1),
        note=note,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000, help="tasks sent at once (1000)")
    parser.add_argument("--seconds", type=float, default=2.0, help="each call's wait (2 s)")
    parser.add_argument(
        "--prefork-tasks", type=int, default=10, help="prefork's tasks, extrapolated (10)"
    )
    parts = ("asyncio", "asyncio-http", "asyncio-64", "threads", "prefork", "peer")
    parser.add_argument("--skip", nargs="*", default=[], choices=parts, help="runs to leave out")
    args = parser.parse_args()
    exit_on_sigterm()
    slow = Server("slow server", [sys.executable, "-m", "bench.slow_http", "{port}"], {})
    results: list[Result] = []
    io = {"TOOLNEXUS_CONCURRENCY": str(args.tasks)}
    try:
        print(
            f"{args.tasks} tasks, each a GET answered after {args.seconds:g} s; one worker process",
            flush=True,
        )
        print(HEADER, flush=True)
        runs = {
            "asyncio": lambda: ours(
                "asyncio",
                slow,
                args,
                {**io, "TOOLNEXUS_POOL": "asyncio", "TOOLNEXUS_RUN": "bench.agents:waiting"},
                args.tasks,
            ),
            "asyncio-http": lambda: ours(
                "asyncio-http",
                slow,
                args,
                {**io, "TOOLNEXUS_POOL": "asyncio", "TOOLNEXUS_RUN": "bench.agents:waiting"},
                args.tasks,
                via_http=True,
            ),
            "asyncio-64": lambda: ours(
                "asyncio-64",
                slow,
                args,
                {**io, "TOOLNEXUS_POOL": "asyncio", "TOOLNEXUS_RUN": "bench.agents:waiting"},
                args.tasks,
                app="bench.capped_worker",
            ),
            "threads": lambda: ours(
                "threads",
                slow,
                args,
                {**io, "TOOLNEXUS_POOL": "threads", "TOOLNEXUS_RUN": BLOCKING_AGENT},
                args.tasks,
            ),
            "prefork": lambda: extrapolated(
                ours(
                    "prefork",
                    slow,
                    args,
                    {"TOOLNEXUS_POOL": "prefork", "TOOLNEXUS_RUN": "bench.agents:waiting"},
                    args.prefork_tasks,
                ),
                args.tasks,
            ),
            "peer": lambda: peer(slow, args),
        }
        for part in parts:
            if part in args.skip:
                continue
            results.append(runs[part]())
            print(results[-1].line(None), flush=True)
        the_peer = next((r for r in results if r.name == "peer"), None)
        print("\nagainst the peer (its time / this one's: above 1 is faster than the peer)")
        print(HEADER)
        for result in results:
            print(result.line(the_peer))
    finally:
        slow.stop()


def extrapolated(result: Result, tasks: int) -> Result:
    """Prefork's time for `tasks` at the rate measured on its smaller run."""
    factor = tasks / result.tasks
    measured = f"measured {result.tasks} in {result.answered:.2f} s"
    return Result(
        name=result.name,
        tasks=tasks,
        answered=result.answered * factor,
        saved=result.saved * factor if result.saved is not None else None,
        rss_mib=result.rss_mib,
        lost=result.lost,
        twice=result.twice,
        note=f"{result.note}; extrapolated ({measured})",
    )


if __name__ == "__main__":
    main()
