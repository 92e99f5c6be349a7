"""The embedded server (`toolnexus-serve`, no role) serves gRPC too when
TOOLNEXUS_GRPC_URL is set: the official a2a-sdk client picks the card's
GRPC interface and sends, streams, gets, subscribes and cancels over it in
the same process as the HTTP port; SIGTERM then stops both, cleanly."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import requests
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.client.transports.grpc import GrpcTransport
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)

from tests.support.embedded import ROOT, command
from tests.support.polling import wait_for
from tests.support.redis_server import free_port


class Embedded:
    def __init__(self, process: subprocess.Popen[bytes], log: Path, port: int, grpc_port: int):
        self.process = process
        self.log = log
        self.url = f"http://127.0.0.1:{port}"
        self.grpc_address = f"127.0.0.1:{grpc_port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Embedded]:
    port, grpc_port = free_port(), free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLNEXUS_")}
    env = {
        **clean,
        "PYTHONPATH": str(ROOT),
        "TOOLNEXUS_RUN": "examples.agents:countdown",
        "TOOLNEXUS_GRPC_URL": f"127.0.0.1:{grpc_port}",
        "TOOLNEXUS_GRPC_PORT": str(grpc_port),
    }
    log = tmp_path / "embedded.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command(), "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    found = Embedded(process, log, port, grpc_port)

    def healthy() -> bool:
        assert process.poll() is None, found.output()
        try:
            return requests.get(f"{found.url}/healthz", timeout=1).ok
        except (requests.ConnectionError, requests.Timeout):
            return False

    try:
        wait_for(healthy, timeout=60, what="toolnexus-serve to answer")
        yield found
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(30)


def message(text: str) -> Message:
    return Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)])


def state_of(event: StreamResponse) -> Any:
    if event.HasField("task"):
        return event.task.status.state
    if event.HasField("status_update"):
        return event.status_update.status.state
    return None


async def session(embedded: Embedded) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, embedded.url).get_agent_card()
    seen["bindings"] = {i.protocol_binding: i.url for i in card.supported_interfaces}
    config = ClientConfig(
        streaming=True,
        supported_protocol_bindings=["GRPC"],
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    client = ClientFactory(config).create(card)
    seen["transport"] = type(client._transport)
    streamed = [e async for e in client.send_message(SendMessageRequest(message=message("0.1 3")))]
    seen["stream"] = [state_of(event) for event in streamed]
    task_id = streamed[0].task.id
    got = await client.get_task(GetTaskRequest(id=task_id))
    seen["get"] = (got.id, got.status.state)

    running = client.send_message(SendMessageRequest(message=message("0.5 20")))
    first = await anext(running)
    running_id = first.task.id
    subscribed = client.subscribe(SubscribeToTaskRequest(id=running_id))
    seen["subscribed"] = state_of(await anext(subscribed))
    canceled = await client.cancel_task(CancelTaskRequest(id=running_id))
    seen["canceled"] = canceled.status.state
    seen["subscription_ends"] = [state_of(e) async for e in subscribed][-1]
    await running.aclose()
    await client.close()
    return seen


def test_the_embedded_server_serves_grpc_to_the_official_client(embedded: Embedded) -> None:
    seen = asyncio.run(session(embedded))
    assert seen["bindings"]["GRPC"] == embedded.grpc_address
    assert seen["transport"] is GrpcTransport
    assert seen["stream"][0] == TaskState.TASK_STATE_SUBMITTED
    assert seen["stream"][-1] == TaskState.TASK_STATE_COMPLETED
    assert seen["get"][1] == TaskState.TASK_STATE_COMPLETED
    assert seen["subscribed"] == TaskState.TASK_STATE_WORKING
    assert seen["canceled"] == TaskState.TASK_STATE_CANCELED
    assert seen["subscription_ends"] == TaskState.TASK_STATE_CANCELED
    assert f"gRPC on 127.0.0.1:{embedded.grpc_address.rsplit(':', 1)[1]}" in embedded.output()

    embedded.process.send_signal(signal.SIGTERM)
    assert embedded.process.wait(30) == 0, embedded.output()
    assert "stopped" in embedded.output()
    channel = grpc.insecure_channel(embedded.grpc_address)
    with channel, pytest.raises(grpc.FutureTimeoutError):  # nothing listens there now
        grpc.channel_ready_future(channel).result(timeout=2)
