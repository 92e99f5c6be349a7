"""Many long-polls on one front-end process, beside the a2a-sdk server's waiting blocking sends.

    python3 bench/long_poll.py [--polls 1000] [--rate 500] [--open-rate 1000] [--clients 0]
                               [--skip PART ...]

Two servers, one after the other, each with --polls calls waiting until
their task changes, the changes spread evenly at --rate per second from two
seconds after the go signal:

* this service (`ours`): a private redis-server, gunicorn with the packaged
  web.http.gunicorn_conf and ONE worker process (WEB_CONCURRENCY=1, its
  connection limit raised to fit), no agent: the tasks are made `working`
  through the store, each long-polled by an A2A 1.1 GetTask with
  `currentGeneration` at its generation; this process then completes each at its due time
  through the store (a plain process of its own, as a worker on another
  machine would), with a status message stamped with the time it was made;
* the official a2a-sdk server (`peer`, bench/sdk_peer.py, one uvicorn
  process, InMemoryTaskStore): it has no long-poll, so its nearest wait is a
  blocking SendMessage (A2A 1.0), whose executor waits for the go file and
  completes at the same due time with the same stamp.

The clients (asyncio, httpx, a connection per call, spread over processes:
--clients, by default one per 1,000 calls) send every call, --open-rate
a second in all, then report;
once all are sent and the servers had a moment to read them, the go file
is written. Printed for each: calls waiting, answered after their change
(of the calls), answered early (before their change: a wait that gave up),
lost (no answer), answer latency after the change (stamp -> received: p50,
p99, max) and the serving process's RSS before the calls and with all of
them waiting. Aim: 10,000 waiting in one process under 1 GiB, p99 <= 100 ms.
The load average is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.agents import Plan, stamp, stamped
from bench.processes import Server, exit_on_sigterm, gunicorn, percentile, rss_kib, uvicorn
from tests.support.redis_server import RedisServer

CALLS_PER_CLIENT = 1_000
LEAD = 2.0  # seconds from the go signal to the first change
BATCH = 20


@dataclass
class Answer:
    key: str
    received: float
    made: float | None  # the stamp the answer carries (None: not changed yet)
    error: str | None = None


def _body(kind: str, key: str) -> dict[str, Any]:
    if kind == "ours":
        params: dict[str, Any] = {"id": key, "currentGeneration": "2"}
        return {"jsonrpc": "2.0", "id": key, "method": "GetTask", "params": params}
    message = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": [{"text": key}]}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


def _made(reply: dict[str, Any]) -> float | None:
    result = reply.get("result") or {}
    task = result.get("task", result)
    parts = (task.get("status") or {}).get("message", {}).get("parts") or [{}]
    found = stamped(str(parts[0].get("text", "")))
    return found[1] if found is not None else None


async def _call(client: httpx.AsyncClient, url: str, kind: str, key: str) -> Answer:
    version = "1.1" if kind == "ours" else "1.0"
    try:
        reply = await client.post(url, json=_body(kind, key), headers={"A2A-Version": version})
        data = reply.json()
    except (httpx.HTTPError, ValueError) as error:
        return Answer(key, time.time(), None, f"{type(error).__name__}: {error}")
    if "error" in data:
        return Answer(key, time.time(), None, str(data["error"])[:200])
    return Answer(key, time.time(), _made(data))


def _shard(url: str, kind: str, keys: list[str], open_rate: float, conn: Any) -> None:
    exit_on_sigterm()
    asyncio.run(_drive(url, kind, keys, open_rate, conn))


async def _drive(url: str, kind: str, keys: list[str], open_rate: float, conn: Any) -> None:
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    timeout = httpx.Timeout(30.0, read=None)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        calls = []
        # Paced: a server that cannot read the requests of a burst of
        # thousands of new connections within its idle timeout closes them.
        for first in range(0, len(keys), BATCH):
            for key in keys[first : first + BATCH]:
                calls.append(asyncio.create_task(_call(client, url, kind, key)))
            await asyncio.sleep(BATCH / open_rate)
        conn.send("sent")
        answers = await asyncio.gather(*calls)
    conn.send([(a.key, a.received, a.made, a.error) for a in answers])
    conn.close()


@dataclass
class Outcome:
    waiting: int
    answered: int
    early: int
    lost: int
    latencies: list[float]
    rss_before: int
    rss_waiting: int


def run(
    kind: str, server: Server, keys: list[str], args: argparse.Namespace, go: Path, change: Any
) -> Outcome:
    (serving,) = server.workers()
    before = rss_kib(serving)
    shards = max(1, args.clients or math.ceil(len(keys) / CALLS_PER_CLIENT))
    context = multiprocessing.get_context("spawn")
    pipes, processes = [], []
    for index in range(shards):
        mine, theirs = context.Pipe()
        chunk = keys[index::shards]
        rate = args.open_rate / shards
        process = context.Process(target=_shard, args=(f"{server.url}/", kind, chunk, rate, theirs))
        process.start()
        pipes.append(mine)
        processes.append(process)
    for pipe in pipes:
        assert pipe.recv() == "sent"
    time.sleep(2.0)  # the server reads the last requests
    waiting = rss_kib(serving)
    start = time.time()
    go.write_text(repr(start))
    if change is not None:
        change(start)
    answers = [answer for pipe in pipes for answer in pipe.recv()]
    for process in processes:
        process.join(60)
    latencies = [received - made for _, received, made, error in answers if made is not None]
    early = sum(1 for _, _, made, error in answers if made is None and error is None)
    lost = len(keys) - len(latencies) - early
    errors = [(received - start, error) for _, received, _, error in answers if error]
    if errors:
        times = sorted(at for at, _ in errors)
        print(
            f"  {kind}: {len(errors)} errors, {times[0]:.1f}-{times[-1]:.1f} s after go,"
            f" first: {errors[0][1]}"
        )
    return Outcome(len(keys), len(latencies), early, lost, latencies, before, waiting)


def report(kind: str, outcome: Outcome) -> None:
    ms = [1000 * value for value in outcome.latencies]
    per = (outcome.rss_waiting - outcome.rss_before) / max(1, outcome.waiting)
    print(
        f"{kind:5} waiting {outcome.waiting}, answered after the change {outcome.answered},"
        f" early {outcome.early}, lost {outcome.lost};"
        f" latency p50 {percentile(ms, 0.5):.1f} ms, p99 {percentile(ms, 0.99):.1f} ms,"
        f" max {max(ms, default=float('nan')):.1f} ms;"
        f" RSS {outcome.rss_before / 1024:.0f} -> {outcome.rss_waiting / 1024:.0f} MiB"
        f" ({per:.1f} KiB a call)"
    )


def ours(args: argparse.Namespace, folder: Path) -> Outcome:
    from shared.events import to_state
    from shared.stores.redis.store import redis_store
    from shared.task import COMPLETED, WORKING, agent_message, new_task, text_message
    from shared.transitions import transition

    redis_server = RedisServer().start()
    try:
        store_url = f"{redis_server.url}/1"
        store = redis_store(store_url)
        keys = []
        for _ in range(args.polls):
            task_id = store.create(new_task(text_message("user", "long-poll"))).task["id"]
            assert transition(store, task_id, to_state(WORKING)).applied  # generation 2
            keys.append(task_id)
        env = {
            "TOOLNEXUS_STORE": store_url,
            "TOOLNEXUS_BROKER_URL": f"{redis_server.url}/2",
            "TOOLNEXUS_LOG_LEVEL": "WARNING",
            "TOOLNEXUS_LONG_POLL_TIMEOUT": "600",
            "WEB_CONCURRENCY": "1",
        }
        flags = ["--worker-connections", str(args.polls + 1_000)]
        server = gunicorn("web:create_app()", env, "ours", flags)

        def change(start: float) -> None:
            for index, task_id in enumerate(keys):
                time.sleep(max(0.0, start + LEAD + index / args.rate - time.time()))
                done = to_state(COMPLETED, agent_message(stamp(0)))
                assert transition(store, task_id, done).applied

        try:
            return run("ours", server, keys, args, folder / "go-ours", change)
        finally:
            server.stop()
            store.close()
    finally:
        redis_server.close()


def peer(args: argparse.Namespace, folder: Path) -> Outcome:
    go = folder / "go-peer"
    keys = [
        Plan(events=1, interval=0.0, phase=LEAD + index / args.rate, go=str(go), poll=1.0).encode()
        for index in range(args.polls)
    ]
    env = {"BENCH_SDK_AGENT": "due"}
    server = uvicorn("bench.sdk_peer:create_app", env, 1, "peer")
    try:
        return run("peer", server, keys, args, go, None)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=1_000)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--clients", type=int, default=0)
    parser.add_argument("--open-rate", type=float, default=1_000.0, help="new calls a second")
    parser.add_argument("--skip", action="append", default=[], choices=["ours", "peer"])
    args = parser.parse_args()
    print(
        f"load average at the start {os.getloadavg()[0]:.2f}; {args.polls} calls, {args.rate:g}/s"
    )
    with tempfile.TemporaryDirectory() as folder:
        outcomes = {}
        for name, part in (("ours", ours), ("peer", peer)):
            if name not in args.skip:
                outcomes[name] = part(args, Path(folder))
                report(name, outcomes[name])
    if "ours" in outcomes:
        mine = outcomes["ours"]
        p99 = 1000 * percentile(mine.latencies, 0.99)
        met = mine.rss_waiting < 1024 * 1024 and p99 <= 100 and mine.lost == 0 and mine.early == 0
        print(
            f"aim (under 1 GiB, p99 <= 100 ms, none early or lost): {'met' if met else 'NOT MET'}"
        )
    if len(outcomes) == 2:
        ratio = percentile(outcomes["peer"].latencies, 0.99) / percentile(
            outcomes["ours"].latencies, 0.99
        )
        memory = outcomes["peer"].rss_waiting / max(1, outcomes["ours"].rss_waiting)
        print(f"peer/ours: p99 latency x{ratio:.2f}, RSS waiting x{memory:.2f}")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
