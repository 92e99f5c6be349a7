"""`python -m web.grpc_process` as a test's own process, once it listens."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

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
