"""A fleet with gRPC on serves every client framework, Google ADK's included.

ADK's `RemoteA2aAgent` refuses a card any of whose interfaces is not https
(or http on a loopback host) on the origin the card came from; a gRPC
interface's `host:port` never is. With TOOLNEXUS_CARD_BINDINGS naming the
HTTP bindings only, the public card leaves gRPC out and the extended card
lists it: against compose's front end (gunicorn), the gRPC process and a
Celery worker (and beat) on a private Redis, ADK's agent talks to the service, and the
official a2a-sdk client finds the gRPC interface in the extended card and
sends over it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.client.transports.grpc import GrpcTransport
from a2a.types import GetExtendedAgentCardRequest, Message, Part, Role, SendMessageRequest
from google.adk.agents.remote_a2a_agent import RemoteA2aAgent
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from tests.support.a2a import wait_ready
from tests.support.compose import LocalStack, local_stack, start_grpc
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalStack, str]]:
    grpc_port = free_port()
    settings = {
        "TOOLNEXUS_RUN": "examples.agents:echo",
        "TOOLNEXUS_GRPC_URL": f"127.0.0.1:{grpc_port}",
        "TOOLNEXUS_CARD_BINDINGS": "JSONRPC,HTTP+JSON",
        "TOOLNEXUS_EXTENDED_CARD": '{"description": "every binding"}',
    }
    with local_stack(tmp_path_factory.mktemp("card-bindings"), settings) as (_, stack):
        stack.start("web")
        start_grpc(stack, grpc_port)
        stack.start("worker")
        stack.start("beat")  # /readyz wants the reaper running
        wait_ready(stack.web_url)
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            grpc.channel_ready_future(channel).result(timeout=60)
        yield stack, f"127.0.0.1:{grpc_port}"


async def ask_adk(card_url: str, text: str) -> tuple[list[str], list[str]]:
    """ADK's remote agent sent `text` in a runner: the texts it answered, and its errors."""
    agent = RemoteA2aAgent(name="toolnexus", agent_card=card_url)
    runner = Runner(
        agent=agent,
        app_name="card-bindings",
        session_service=InMemorySessionService(),
        auto_create_session=True,
    )
    texts: list[str] = []
    errors: list[str] = []
    question = types.Content(role="user", parts=[types.Part(text=text)])
    async for event in runner.run_async(user_id="u", session_id="s", new_message=question):
        if event.error_message:
            errors.append(event.error_message)
        if event.content and event.content.parts:
            texts += [part.text for part in event.content.parts if part.text]
    return texts, errors


def test_google_adk_talks_to_a_fleet_with_grpc_on(fleet: tuple[LocalStack, str]) -> None:
    stack, _ = fleet
    card_url = f"{stack.web_url}/.well-known/agent-card.json"
    texts, errors = asyncio.run(ask_adk(card_url, "hello from adk"))
    assert errors == []
    # Once: the result artifact, and no status message repeating it for a
    # 1.0 peer (tests/test_clients_answer_once.py).
    assert texts == ["ran: hello from adk"]


async def over_grpc(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=30) as http:
        public = await A2ACardResolver(http, url).get_agent_card()
    seen: dict[str, Any] = {"public": {i.protocol_binding for i in public.supported_interfaces}}
    rpc = ClientFactory(ClientConfig(supported_protocol_bindings=["JSONRPC"])).create(public)
    extended = await rpc.get_extended_agent_card(GetExtendedAgentCardRequest())
    await rpc.close()
    seen["extended"] = {i.protocol_binding: i.url for i in extended.supported_interfaces}
    config = ClientConfig(
        streaming=False,
        supported_protocol_bindings=["GRPC"],
        grpc_channel_factory=grpc.aio.insecure_channel,
    )
    client = ClientFactory(config).create(extended)
    seen["transport"] = type(client._transport)
    message = Message(
        role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text="over grpc")]
    )
    answers = [event async for event in client.send_message(SendMessageRequest(message=message))]
    seen["answer"] = str(answers[-1])
    await client.close()
    return seen


def test_the_sdk_client_finds_grpc_in_the_extended_card(fleet: tuple[LocalStack, str]) -> None:
    stack, grpc_address = fleet
    seen = asyncio.run(over_grpc(stack.web_url))
    assert seen["public"] == {"JSONRPC", "HTTP+JSON"}
    assert seen["extended"]["GRPC"] == grpc_address
    assert {"JSONRPC", "HTTP+JSON"} <= set(seen["extended"])
    assert seen["transport"] is GrpcTransport
    assert "over grpc" in seen["answer"], seen["answer"]
