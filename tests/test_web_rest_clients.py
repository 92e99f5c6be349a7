"""Clients nobody here wrote, over HTTP+JSON, against the distributed
deployment: compose.yaml's gunicorn and Celery worker (and beat) on a
private Redis, running examples.agents:countdown.

- the official a2a-sdk 1.x client, told to prefer HTTP+JSON: send, get,
  list, cancel, stream, subscribe, and its typed errors;
- the official JavaScript SDK (`@a2a-js/sdk`, installed from the npm
  registry into tests/js by `npm ci`) with its `RestTransportFactory`.

Without node or the installed package the JS test is skipped, saying so;
under CI=true it fails instead.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.client.transports.rest import RestTransport
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
)

from tests.support.a2a import wait_ready
from tests.support.compose import local_stack
from tests.support.redis_server import ci

JS = Path(__file__).parent / "js"
SETTINGS = {"TOOLNEXUS_RUN": "examples.agents:countdown", "TOOLNEXUS_KEEPALIVE": "1"}
COMPLETED = TaskState.TASK_STATE_COMPLETED


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with local_stack(tmp_path_factory.mktemp("rest-clients"), SETTINGS) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="2")
        stack.start("worker")
        stack.start("beat")
        wait_ready(stack.web_url)
        yield stack.web_url


def message(text: str) -> Message:
    return Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)])


def state_of(event: StreamResponse) -> TaskState:
    if event.HasField("task"):
        return event.task.status.state
    if event.HasField("status_update"):
        return event.status_update.status.state
    return TaskState.TASK_STATE_UNSPECIFIED


async def python_client_session(url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=30) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        config = ClientConfig(
            streaming=True, httpx_client=http, supported_protocol_bindings=["HTTP+JSON"]
        )
        client = ClientFactory(config).create(card)
        seen["transport"] = type(client._transport)
        streamed = [e async for e in client.send_message(SendMessageRequest(message=message("2")))]
        seen["stream"] = [state_of(event) for event in streamed]
        task_id = streamed[0].task.id
        got = await client.get_task(GetTaskRequest(id=task_id, history_length=1))
        seen["get"] = (got.id == task_id, got.status.state, len(got.history))
        listed = await client.list_tasks(ListTasksRequest(page_size=50))
        seen["listed"] = task_id in [task.id for task in listed.tasks]
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task_id))
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="no-such-task"))

        polling = ClientConfig(
            streaming=False,
            polling=True,
            httpx_client=http,
            supported_protocol_bindings=["HTTP+JSON"],
        )
        poller = ClientFactory(polling).create(card)
        running = [
            e async for e in poller.send_message(SendMessageRequest(message=message("0.5 8")))
        ]
        canceled = await client.cancel_task(CancelTaskRequest(id=running[0].task.id))
        seen["cancel"] = canceled.status.state

        live = [e async for e in poller.send_message(SendMessageRequest(message=message("0.3 4")))]
        followed = [e async for e in client.subscribe(SubscribeToTaskRequest(id=live[0].task.id))]
        seen["subscribe"] = (followed[0].HasField("task"), state_of(followed[-1]))
    return seen


def test_the_official_python_client_over_http_json(url: str) -> None:
    seen = asyncio.run(python_client_session(url))
    assert seen["transport"] is RestTransport  # the card's HTTP+JSON interface, chosen
    assert seen["stream"][0] == TaskState.TASK_STATE_SUBMITTED
    assert seen["stream"][-1] == COMPLETED
    assert seen["get"] == (True, COMPLETED, 1)
    assert seen["listed"] is True
    assert seen["cancel"] == TaskState.TASK_STATE_CANCELED
    assert seen["subscribe"] == (True, COMPLETED)


def node_and_sdk() -> str:
    """node, with the SDK installed from tests/js/package-lock.json if it is
    not yet (what `npm ci` there does), so the README's test command needs
    nothing more."""
    node, npm = shutil.which("node"), shutil.which("npm")
    sdk = JS / "node_modules" / "@a2a-js" / "sdk"
    problem = None
    if node is None or npm is None:
        problem = "NO NODE OR NPM: the JavaScript SDK test is skipped"
    elif not sdk.is_dir():
        installed = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=JS,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if installed.returncode != 0 or not sdk.is_dir():
            problem = f"NO @a2a-js/sdk: `npm ci` in tests/js failed: {installed.stderr[-300:]}"
    if problem is not None:
        if ci():
            pytest.fail(problem)
        pytest.skip(problem)
    assert node is not None
    return node


def test_the_official_javascript_client_over_http_json(url: str) -> None:
    node = node_and_sdk()
    run = subprocess.run(
        [node, "rest_client.mjs", url], cwd=JS, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["protocol"] == "HTTP+JSON"
    assert report["send"]["state"] == "TASK_STATE_COMPLETED"
    assert report["get"] == {
        "id": report["send"]["id"],
        "state": "TASK_STATE_COMPLETED",
        "history": 1,
    }
    assert report["send"]["id"] in report["list"]["ids"]
    assert report["cancel"]["state"] == "TASK_STATE_CANCELED"
    for streamed in (report["stream"], report["subscribe"]):
        assert streamed["kinds"][0] == "task"
        assert "artifactUpdate" in streamed["kinds"]
        assert streamed["last"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert report["missing"]["error"] == "RestTaskNotFoundError"
