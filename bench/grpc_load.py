"""gRPC: GetTask and SendMessage on this service's gRPC process against the
a2a-sdk's own gRPC server (in memory) in the same run, and open streams
per gRPC process.

    python3 bench/grpc_load.py [--rounds 3] [--seconds 3] [--clients 16] [--streams 1000]

This service: `python -m web.grpc_process` on a private Redis (the store
and the broker; no worker runs, so SendMessage with returnImmediately
measures accepting a task, as the SDK's does before its agent runs), and
the same process on the memory store, as the SDK's peer keeps its tasks
(what the binding costs, apart from a store on the network). The peer:
bench/sdk_grpc_peer.py. Both are driven by the same load generator,
in interleaved rounds (A, B, C, A, B, C, ...): `--clients` threads, each with
its own channel, calling as fast as answers come for `--seconds`. Ratios
are ours over the SDK's, per round and over all rounds. Each server's CPU
time per call (this service's with its Redis's) is shown beside: on a
shared machine the rates follow the neighbours' load, the CPU a call costs
much less.

Streams: `--streams` SubscribeToTask calls opened at once on one channel
(on tasks left `submitted`, so each stays open), counted once each has its
first response (the Task); the process's threads and RSS are read then.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from a2a.types import a2a_pb2, a2a_pb2_grpc  # noqa: E402

from bench.processes import Server, cpu_seconds, finish_task, rss_kib  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

METADATA = (("a2a-version", "1.0"),)


def send_request(blocking: bool = False) -> a2a_pb2.SendMessageRequest:
    message = a2a_pb2.Message(
        role=a2a_pb2.Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        parts=[a2a_pb2.Part(text="hello")],
    )
    configuration = a2a_pb2.SendMessageConfiguration(return_immediately=not blocking)
    return a2a_pb2.SendMessageRequest(message=message, configuration=configuration)


def drive(address: str, call: Callable[[Any], Any], clients: int, seconds: float) -> float:
    """Calls per second by `clients` threads, each on a channel of its own."""
    counts = [0] * clients
    start = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def client(index: int) -> None:
        with grpc.insecure_channel(address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            call(stub)  # connected and warm before the clock starts
            start.wait()
            while time.monotonic() < stop_at[0]:
                call(stub)
                counts[index] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    stop_at[0] = time.monotonic() + seconds + 0.5
    start.wait()
    began = time.monotonic()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.monotonic() - began)


def loads(address: str, finish: Callable[[str], None] | None) -> dict[str, Callable[[Any], Any]]:
    """GetTask (of a task left submitted: no worker runs here), SendMessage,
    and GetTask of a finished task where there is one: `finish` completes a
    task in this service's store; the SDK's echo agent finishes its own."""
    with grpc.insecure_channel(address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        task = stub.SendMessage(send_request(), metadata=METADATA, timeout=10).task
        assert stub.GetTask(a2a_pb2.GetTaskRequest(id=task.id), metadata=METADATA).id == task.id
        done = stub.SendMessage(send_request(), metadata=METADATA, timeout=10).task
        if finish is not None:
            finish(done.id)
        get_done = a2a_pb2.GetTaskRequest(id=done.id)
        deadline = time.monotonic() + 10
        while (
            stub.GetTask(get_done, metadata=METADATA).status.state != a2a_pb2.TASK_STATE_COMPLETED
        ):
            if time.monotonic() > deadline:
                get_done = None  # nothing finishes it: no such figure for this server
                break
            time.sleep(0.05)
    get = a2a_pb2.GetTaskRequest(id=task.id)
    found: dict[str, Callable[[Any], Any]] = {
        "GetTask": lambda stub: stub.GetTask(get, metadata=METADATA, timeout=10),
        "SendMessage": lambda stub: stub.SendMessage(send_request(), metadata=METADATA, timeout=10),
    }
    if get_done is not None:
        found["GetTask, finished"] = lambda stub: stub.GetTask(
            get_done, metadata=METADATA, timeout=10
        )
    return found


async def open_streams(address: str, count: int, server_pid: int) -> dict[str, Any]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        ids = []
        for _ in range(count):
            reply = await stub.SendMessage(send_request(), metadata=METADATA, timeout=10)
            ids.append(reply.task.id)
        calls = [
            stub.SubscribeToTask(a2a_pb2.SubscribeToTaskRequest(id=i), metadata=METADATA)
            for i in ids
        ]
        began = time.monotonic()
        firsts = await asyncio.gather(
            *(asyncio.wait_for(call.read(), 60) for call in calls), return_exceptions=True
        )
        elapsed = time.monotonic() - began
        opened = sum(1 for first in firsts if isinstance(first, a2a_pb2.StreamResponse))
        errors = sorted({type(f).__name__ for f in firsts if isinstance(f, BaseException)})
        threads = len(list(Path(f"/proc/{server_pid}/task").iterdir()))
        rss = rss_kib(server_pid)
        for call in calls:
            call.cancel()
    return {"opened": opened, "seconds": elapsed, "threads": threads, "rss_mib": rss / 1024,
            "errors": errors}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--streams", type=int, default=1000)
    args = parser.parse_args()
    redis = RedisServer().start()
    servers: list[Server] = []
    try:
        env = {
            "TOOLNEXUS_STORE": f"{redis.url}/1",
            "TOOLNEXUS_BROKER_URL": f"{redis.url}/2",
            "TOOLNEXUS_QUEUE": "bench",
            "TOOLNEXUS_LOG_LEVEL": "WARNING",
        }
        command = [sys.executable, "-m", "web.grpc_process", "--port", "{port}"]
        ours = Server("this service's gRPC process", command, env)
        servers.append(ours)
        in_memory = Server(
            "this service's gRPC process, memory store",
            command,
            {**env, "TOOLNEXUS_STORE": "memory"},
        )
        servers.append(in_memory)
        peer_command = [sys.executable, "-m", "bench.sdk_grpc_peer", "{port}"]
        peer = Server("a2a-sdk gRPC, in memory", peer_command, {})
        servers.append(peer)
        targets = {
            "toolnexus": f"127.0.0.1:{ours.port}",
            "toolnexus-memory": f"127.0.0.1:{in_memory.port}",
            "sdk": f"127.0.0.1:{peer.port}",
        }
        finishers = {"toolnexus": partial(finish_task, f"{redis.url}/1")}
        calls = {name: loads(address, finishers.get(name)) for name, address in targets.items()}
        pids = {
            "toolnexus": (ours.process.pid, redis.process.pid),
            "toolnexus-memory": (in_memory.process.pid,),
            "sdk": (peer.process.pid,),
        }
        for method in ("GetTask", "GetTask, finished", "SendMessage"):
            measured = {name: address for name, address in targets.items() if method in calls[name]}
            rates: dict[str, list[float]] = {name: [] for name in measured}
            costs: dict[str, list[float]] = {name: [] for name in measured}
            for _ in range(args.rounds):
                for name, address in measured.items():
                    before = sum(map(cpu_seconds, pids[name]))
                    rate = drive(address, calls[name][method], args.clients, args.seconds)
                    spent = sum(map(cpu_seconds, pids[name])) - before
                    rates[name].append(rate)
                    costs[name].append(spent / (rate * args.seconds) * 1e6)
            for ours_name in ("toolnexus", "toolnexus-memory"):
                if ours_name not in measured:
                    continue
                ratios = [a / b for a, b in zip(rates[ours_name], rates["sdk"], strict=True)]
                shown = ", ".join(f"{r:.2f}" for r in ratios)
                print(
                    f"{method}: {ours_name} {statistics.median(rates[ours_name]):.0f}/s,"
                    f" sdk {statistics.median(rates['sdk']):.0f}/s (medians of {args.rounds});"
                    f" ratio per round {shown}; median {statistics.median(ratios):.2f}x;"
                    f" server CPU per call {statistics.median(costs[ours_name]):.0f} µs"
                    f" vs {statistics.median(costs['sdk']):.0f} µs",
                    flush=True,
                )
        if args.streams:
            found = asyncio.run(open_streams(targets["toolnexus"], args.streams, ours.process.pid))
            print(
                f"streams: {found['opened']}/{args.streams} open in {found['seconds']:.1f} s;"
                f" server threads {found['threads']}, RSS {found['rss_mib']:.0f} MiB"
                + (f"; errors {found['errors']}" if found["errors"] else ""),
                flush=True,
            )
    finally:
        for server in servers:
            server.stop()
        redis.close()


if __name__ == "__main__":
    main()
