"""Clients nobody here wrote, against a live server over real HTTP.

The official a2a-sdk 1.x client in its 1.0 default and in its 0.3
compatibility mode, and the toolnexus client's round trip (the card's
`url`, no `A2A-Version`, lowercase states, polling) made with requests:
in process, against `toolnexus-serve` (embedded) and against gunicorn with
Celery and beat (distributed), each with the default card.
The SDK picks 0.3 when the card's JSON-RPC interface says protocolVersion
0.3 (`ClientFactory` -> `CompatJsonRpcTransport`, which sends
`message/send` with `A2A-Version: 0.3`); the 0.3 test hands it the card
with only that interface, as an agent that speaks only 0.3 would publish.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.compat.v0_3.jsonrpc_transport import CompatJsonRpcTransport
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    Task,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
)

from shared import Settings, memory_store
from tests.support.polling import wait_for
from tests.test_web_support import PlayingDispatcher, Recorded, live_server
from web import create_app

TOKEN = "interop-token"


@pytest.fixture
def server() -> Iterator[tuple[str, Recorded]]:
    store = memory_store()
    app = create_app(
        Settings(api_tokens=(TOKEN,)), store=store, dispatcher=PlayingDispatcher(store)
    )
    with live_server(app) as served:
        yield served


async def sdk_round_trip(base_url: str, *, legacy: bool, text: str) -> tuple[Task, Any]:
    """Send with the SDK (non-blocking, as a polling client) and poll GetTask
    until the task is completed; returns the task and the transport used."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(timeout=10, headers=headers) as http:
        card = await A2ACardResolver(http, base_url).get_agent_card()
        if legacy:
            kept = [i for i in card.supported_interfaces if i.protocol_version == "0.3"]
            del card.supported_interfaces[:]
            card.supported_interfaces.extend(kept)
        config = ClientConfig(streaming=False, polling=True, httpx_client=http)
        client = ClientFactory(config).create(card)
        message = Message(role=Role.ROLE_USER, message_id="sdk-1", parts=[Part(text=text)])
        task = Task()
        async for event in client.send_message(SendMessageRequest(message=message)):
            task = event.task
        assert task.id
        assert task.status.state in (
            TaskState.TASK_STATE_SUBMITTED,
            TaskState.TASK_STATE_WORKING,
            TaskState.TASK_STATE_COMPLETED,
        )
        deadline = time.monotonic() + 10
        while task.status.state != TaskState.TASK_STATE_COMPLETED:
            assert time.monotonic() < deadline, f"task stuck in {task.status.state}"
            await asyncio.sleep(0.02)
            task = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))
        transport = client._transport  # which transport the factory chose
        if not legacy:
            listed = await client.list_tasks(ListTasksRequest(page_size=10))
            assert task.id in [t.id for t in listed.tasks]
            with pytest.raises(TaskNotCancelableError):  # a completed task is final
                await client.cancel_task(CancelTaskRequest(id=task.id))
        await client.close()
        return task, transport


@pytest.mark.parametrize("legacy", [False, True], ids=["a2a-1.0", "a2a-0.3-compat"])
def test_official_sdk_client_round_trip(server: tuple[str, Recorded], legacy: bool) -> None:
    base_url, recorded = server
    task, transport = asyncio.run(sdk_round_trip(base_url, legacy=legacy, text="hello"))
    assert [part.text for part in task.artifacts[0].parts] == ["ran: hello"]
    assert len(task.history) == 1 and task.history[0].role == Role.ROLE_AGENT
    if legacy:
        assert isinstance(transport, CompatJsonRpcTransport)
        assert ("0.3", "message/send") in recorded.calls
        assert ("0.3", "tasks/get") in recorded.calls
        assert all(version == "0.3" for version, _ in recorded.calls)
    else:
        assert ("1.0", "SendMessage") in recorded.calls
        assert ("1.0", "GetTask") in recorded.calls
        assert all(version == "1.0" for version, _ in recorded.calls)


def toolnexus_round_trip(base_url: str, text: str) -> dict[str, Any]:
    """What the toolnexus client does: read the card (no version asked),
    post `SendMessage` to the card's `url` without `A2A-Version`, and poll
    GetTask there until the task, in lowercase states, is completed."""
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {TOKEN}"
    card = session.get(base_url + "/.well-known/agent-card.json", timeout=10).json()
    endpoint = card["url"]
    assert card["preferredTransport"] == "JSONRPC"

    def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
        reply = session.post(
            endpoint,
            json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
            timeout=10,
        )
        assert reply.status_code == 200, reply.text
        result: dict[str, Any] = reply.json()["result"]
        return result

    message = {
        "role": "user",
        "messageId": f"toolnexus-{time.monotonic_ns()}",
        "parts": [{"kind": "text", "text": text}],
    }
    task = call("SendMessage", {"message": message, "configuration": {"blocking": False}})
    assert task["status"]["state"] in ("submitted", "working", "completed")

    def completed() -> dict[str, Any] | None:
        current = call("GetTask", {"id": task["id"]})
        assert current["status"]["state"] in ("submitted", "working", "completed"), current
        return current if current["status"]["state"] == "completed" else None

    return wait_for(completed, timeout=30, what="the toolnexus client's task to complete")


def test_raw_toolnexus_round_trip_with_requests(server: tuple[str, Recorded]) -> None:
    base_url, recorded = server
    done = toolnexus_round_trip(base_url, "raw hello")
    assert done["artifacts"][0]["parts"] == [{"kind": "text", "text": "ran: raw hello"}]
    assert all(version is None for version, _ in recorded.calls)
    assert (None, "SendMessage") in recorded.calls
    unauthenticated = requests.post(
        base_url + "/",
        json={"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": done["id"]}},
        timeout=10,
    )
    assert unauthenticated.status_code == 401
    assert unauthenticated.json()["error"]["code"] == -32000


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`toolnexus-serve`: front end, worker and reaper in one process, on a
    file store, with the default card."""
    from tests.support.embedded import embedded_server

    folder = tmp_path_factory.mktemp("interop-embedded")
    env = {"TOOLNEXUS_API_TOKENS": TOKEN, "TOOLNEXUS_STORE": f"file:{folder / 'tasks'}"}
    with embedded_server(folder, env) as (host, port):
        yield f"http://{host}:{port}"


@pytest.mark.parametrize("client", ["toolnexus", "a2a-1.0", "a2a-0.3-compat"])
def test_every_client_generation_against_the_embedded_server(embedded: str, client: str) -> None:
    if client == "toolnexus":
        done = toolnexus_round_trip(embedded, "embedded")
        assert done["artifacts"][0]["parts"] == [{"kind": "text", "text": "ran: embedded"}]
        return
    legacy = client == "a2a-0.3-compat"
    task, transport = asyncio.run(sdk_round_trip(embedded, legacy=legacy, text="embedded"))
    assert [part.text for part in task.artifacts[0].parts] == ["ran: embedded"]
    assert isinstance(transport, CompatJsonRpcTransport) == legacy


@pytest.fixture(scope="module")
def celery_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The compose file's web (gunicorn), worker (Celery) and beat on a private Redis."""
    from tests.support.a2a import wait_ready
    from tests.support.compose import local_stack

    folder = tmp_path_factory.mktemp("interop")
    with local_stack(folder, {"TOOLNEXUS_API_TOKENS": TOKEN}) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("worker")
        stack.start("beat")  # the web tier is ready once the reaper runs
        wait_ready(stack.web_url)
        yield stack.web_url


@pytest.mark.parametrize("legacy", [False, True], ids=["a2a-1.0", "a2a-0.3-compat"])
def test_official_sdk_client_against_gunicorn_and_a_celery_worker(
    celery_stack: str, legacy: bool
) -> None:
    task, _ = asyncio.run(sdk_round_trip(celery_stack, legacy=legacy, text="real workers"))
    assert [part.text for part in task.artifacts[0].parts] == ["ran: real workers"]
    assert task.history[-1].role == Role.ROLE_AGENT


def test_the_toolnexus_client_against_gunicorn_and_a_celery_worker(celery_stack: str) -> None:
    done = toolnexus_round_trip(celery_stack, "real workers")
    assert done["artifacts"][0]["parts"] == [{"kind": "text", "text": "ran: real workers"}]
