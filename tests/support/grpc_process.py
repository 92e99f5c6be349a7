"""`python -m web.grpc_process` as a test's own process, once it listens."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from a2a.types import a2a_pb2

from tests.support.compose import ROOT, ServiceProcess


@contextmanager
def grpc_process(env: Mapping[str, str], log: Path) -> Iterator[ServiceProcess]:
    """The gRPC process with `env` (which names its TOOLNEXUS_GRPC_PORT),
    yielded once it accepts connections (the test fails with its output if it
    never does), stopped afterwards."""
    port = env["TOOLNEXUS_GRPC_PORT"]
    process = ServiceProcess("grpc", [sys.executable, "-m", "web.grpc_process"], env, ROOT, log)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=60)
            except grpc.FutureTimeoutError:
                pytest.fail(f"the gRPC process did not listen: {process.output()[-3000:]}")
        yield process
    finally:
        process.stop()


def process_env(redis_url: str, port: int, queue: str) -> dict[str, str]:
    """The gRPC process on `port`, its store and broker databases 1 and 2 of
    the redis-server at `redis_url`, its queue `queue`."""
    return {
        "TOOLNEXUS_STORE": f"{redis_url}/1",
        "TOOLNEXUS_BROKER_URL": f"{redis_url}/2",
        "TOOLNEXUS_QUEUE": queue,
        "TOOLNEXUS_GRPC_PORT": str(port),
        "TOOLNEXUS_LOG_LEVEL": "WARNING",
    }


def sent_at_once(stub: Any, metadata: Sequence[tuple[str, str]], text: str = "hi") -> Any:
    """A new task, sent with `returnImmediately` over `stub` (an A2AService stub)."""
    message = a2a_pb2.Message(
        role=a2a_pb2.Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[a2a_pb2.Part(text=text)]
    )
    configuration = a2a_pb2.SendMessageConfiguration(return_immediately=True)
    request = a2a_pb2.SendMessageRequest(message=message, configuration=configuration)
    return stub.SendMessage(request, metadata=metadata, timeout=30).task
