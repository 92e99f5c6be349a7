"""A framework's A2A client sees a text answer once.

A plain function's text answer is kept twice in a completed task: as the
`result` artifact and as the completed status's message (the 0.3 shape
this service has always served). Google ADK's `RemoteA2aAgent` (A2A 1.0,
JSON-RPC, SendStreamingMessage) turns the artifact update and the status
message each into an event, so its user read the answer twice. The message
is marked as a repeat where it is written, and 1.0 and 1.1 peers get the
status without it; toolnexus's own (unversioned) and 0.3 peers read the
same bytes as before.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import requests

from shared.dialects import V03, V10, V11, event_for, task_for
from shared.events import fold
from shared.task import REPEATS_RESULT, Task, new_task, text_message
from tests.support.embedded import embedded_server
from tests.support.redis_server import ci
from toolnexus import Artifact, Done
from worker.engine.results import final_change

pytestmark = [pytest.mark.timeout(180)]


def needs(module: str, package: str) -> None:
    """Skipped loudly without `module`; failed under CI=true."""
    if importlib.util.find_spec(module) is None:
        assert not ci(), f"no {module}: pip install {package}"
        pytest.skip(f"no {module}: pip install {package}")


def completed(result: object) -> tuple[Task, list[Any]]:
    """A task completed with `result` as the engine saves it, and its events."""
    task = new_task(text_message("user", "hello"))
    events = final_change(result)(task)
    return fold(task, events), events


def unmarked(value: Any) -> Any:
    """`value` (a task or an event) as it was kept before the mark existed."""
    copy = json.loads(json.dumps(value))
    copy["status"].pop(REPEATS_RESULT, None)
    return copy


def test_the_repeated_message_is_marked_and_1_0_peers_read_the_answer_once() -> None:
    task, events = completed("ran: hello")
    assert task["status"][REPEATS_RESULT] is True  # type: ignore[typeddict-item]
    for version in (V10, V11):
        shown = task_for(version, task)
        assert "message" not in shown["status"]
        assert shown["artifacts"][0]["parts"] == [{"text": "ran: hello"}]
        (update,) = [event_for(version, e) for e in events if e["kind"] == "status-update"]
        assert update["statusUpdate"]["status"] == {
            "state": "TASK_STATE_COMPLETED",
            "timestamp": task["status"]["timestamp"],
        }


def test_0_3_peers_read_the_same_bytes_as_before_the_mark() -> None:
    task, events = completed("ran: hello")
    shown = task_for(V03, task)
    assert json.dumps(shown) == json.dumps(task_for(V03, unmarked(task)))
    assert shown["status"]["message"]["parts"] == [{"kind": "text", "text": "ran: hello"}]
    assert REPEATS_RESULT not in json.dumps(shown)
    for event in events:
        assert json.dumps(event_for(V03, event)) == json.dumps(
            event_for(V03, unmarked(event) if event["kind"] == "status-update" else event)
        )


def test_closing_words_of_their_own_are_shown_to_every_peer() -> None:
    task, _ = completed(Done("Here is your report.", artifacts=[Artifact("the report")]))
    assert REPEATS_RESULT not in task["status"]
    for version in (V03, V10, V11):
        assert "message" in task_for(version, task)["status"]


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("answer-once")
    with embedded_server(folder, {"TOOLNEXUS_RUN": "examples.agents:echo"}) as (host, port):
        yield f"http://{host}:{port}"


async def ask_adk(url: str, text: str) -> list[str]:
    """ADK's remote agent sent `text` in a runner: every text its events carry."""
    from google.adk.agents.remote_a2a_agent import RemoteA2aAgent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    agent = RemoteA2aAgent(name="toolnexus", agent_card=f"{url}/.well-known/agent-card.json")
    runner = Runner(
        agent=agent,
        app_name="answer-once",
        session_service=InMemorySessionService(),
        auto_create_session=True,
    )
    texts: list[str] = []
    question = types.Content(role="user", parts=[types.Part(text=text)])
    async for event in runner.run_async(user_id="u", session_id="s", new_message=question):
        assert not event.error_message, event.error_message
        if event.content and event.content.parts:
            texts += [part.text for part in event.content.parts if part.text]
    await runner.close()
    return texts


def test_google_adk_s_remote_agent_shows_the_answer_once(echo_server: str) -> None:
    needs("google.adk", "google-adk")
    assert asyncio.run(ask_adk(echo_server, "hello from adk")) == ["ran: hello from adk"]


def rpc(url: str, method: str, params: dict[str, Any], version: str | None) -> bytes:
    headers = {"A2A-Version": version} if version else {}
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    return requests.post(f"{url}/", json=body, headers=headers, timeout=30).content


def test_over_the_wire_0_3_and_unversioned_peers_still_read_the_message(echo_server: str) -> None:
    message = {"role": "ROLE_USER", "messageId": "m-once", "parts": [{"text": "hi"}]}
    sent = json.loads(rpc(echo_server, "SendMessage", {"message": message}, V10))
    task = sent["result"]["task"]
    assert "message" not in task["status"]
    assert task["artifacts"][0]["parts"] == [{"text": "ran: hi"}]
    for method, version in (("GetTask", None), ("tasks/get", V03)):
        read = json.loads(rpc(echo_server, method, {"id": task["id"]}, version))["result"]
        assert read["status"]["message"]["parts"] == [{"kind": "text", "text": "ran: hi"}]
        assert read["artifacts"][0]["parts"] == [{"kind": "text", "text": "ran: hi"}]
        assert REPEATS_RESULT not in json.dumps(read)


def test_fasta2a_s_client_reads_the_0_3_task_with_the_answer_in_both_places(
    echo_server: str,
) -> None:
    """fasta2a's client asks `tasks/get` with no version header: the 0.3
    dialect, whose bytes the mark leaves as they were."""
    needs("fasta2a", "fasta2a")
    from fasta2a.client import A2AClient

    message = {"role": "ROLE_USER", "messageId": "m-fasta2a", "parts": [{"text": "hi"}]}
    sent = json.loads(rpc(echo_server, "SendMessage", {"message": message}, V10))

    async def read() -> Any:
        async with httpx.AsyncClient(timeout=30) as http:
            return await A2AClient(echo_server, http_client=http).get_task(
                sent["result"]["task"]["id"]
            )

    task = asyncio.run(read())["result"]
    assert task["status"]["state"] == "completed"
    # (its schema's text part has no `kind`: it drops the 0.3 tag as it reads)
    assert [part["text"] for part in task["artifacts"][0]["parts"]] == ["ran: hi"]
    assert [part["text"] for part in task["status"]["message"]["parts"]] == ["ran: hi"]
