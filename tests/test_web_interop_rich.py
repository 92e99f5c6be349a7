"""The official a2a-sdk client, in its 1.0 mode and its 0.3 compatibility
mode, receiving what rich agents produce: file and data artifacts, a direct
message reply, and a chunked artifact streamed in order, from gunicorn and
a real Celery worker running `examples.tck:agent` (which picks a behaviour
by the message id's prefix)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse
from google.protobuf.json_format import MessageToDict

MODES = pytest.mark.parametrize("legacy", [False, True], ids=["a2a-1.0", "a2a-0.3-compat"])


@pytest.fixture(scope="module")
def tck_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.support.a2a import wait_ready
    from tests.support.compose import local_stack

    folder = tmp_path_factory.mktemp("interop-rich")
    with local_stack(folder, {"TOOLNEXUS_RUN": "examples.tck:agent"}) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("worker")
        stack.start("beat")
        wait_ready(stack.web_url)
        yield stack.web_url


async def exchange(base_url: str, prefix: str, *, legacy: bool, streaming: bool) -> list[Any]:
    """Send one message whose id starts with `prefix`; every StreamResponse
    the SDK yields, as dicts."""
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        assert card.capabilities.streaming
        if legacy:
            kept = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
            del card.supported_interfaces[:]
            card.supported_interfaces.extend(kept)
        client = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card)
        message = Message(
            role=Role.ROLE_USER, message_id=f"{prefix}-{uuid.uuid4()}", parts=[Part(text="go")]
        )
        received: list[Any] = []
        async for event in client.send_message(SendMessageRequest(message=message)):
            assert isinstance(event, StreamResponse)
            received.append(MessageToDict(event))
        await client.close()
        return received


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


@MODES
def test_file_artifacts_arrive_with_their_bytes_name_and_type(tck_stack: str, legacy: bool) -> None:
    (only,) = run(exchange(tck_stack, "tck-artifact-file", legacy=legacy, streaming=False))
    task = only["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    part = task["artifacts"][0]["parts"][0]
    assert part["raw"] == "dGNr"  # b"tck", base64
    assert (part["filename"], part["mediaType"]) == ("output.txt", "text/plain")


@MODES
def test_file_urls_arrive_as_urls(tck_stack: str, legacy: bool) -> None:
    (only,) = run(exchange(tck_stack, "tck-artifact-file-url", legacy=legacy, streaming=False))
    part = only["task"]["artifacts"][0]["parts"][0]
    assert part["url"] == "https://example.com/output.txt"
    assert part["filename"] == "output.txt"


@MODES
def test_data_artifacts_arrive_as_data(tck_stack: str, legacy: bool) -> None:
    (only,) = run(exchange(tck_stack, "tck-artifact-data", legacy=legacy, streaming=False))
    part = only["task"]["artifacts"][0]["parts"][0]
    assert part["data"] == {"key": "value", "count": 42.0}


@MODES
def test_a_direct_message_reply_arrives_as_a_message(tck_stack: str, legacy: bool) -> None:
    (only,) = run(exchange(tck_stack, "tck-message-response", legacy=legacy, streaming=False))
    assert set(only) == {"message"}
    assert only["message"]["role"] == "ROLE_AGENT"
    assert only["message"]["parts"] == [{"text": "Direct message response"}]


@MODES
def test_a_streamed_chunked_artifact_arrives_whole_and_in_order(
    tck_stack: str, legacy: bool
) -> None:
    events = run(exchange(tck_stack, "tck-stream-artifact-chunked", legacy=legacy, streaming=True))
    assert "task" in events[0]
    chunks = [e["artifactUpdate"] for e in events if "artifactUpdate" in e]
    assert [c["artifact"]["parts"][0]["text"] for c in chunks] == ["chunk-1 ", "chunk-2"]
    assert [c.get("append", False) for c in chunks] == [False, True]
    assert [c.get("lastChunk", False) for c in chunks] == [False, True]
    assert len({c["artifact"]["artifactId"] for c in chunks}) == 1
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


@MODES
def test_a_streamed_message_reply_is_that_message_alone(tck_stack: str, legacy: bool) -> None:
    events = run(exchange(tck_stack, "tck-message-response", legacy=legacy, streaming=True))
    assert [set(event) for event in events] == [{"message"}]
