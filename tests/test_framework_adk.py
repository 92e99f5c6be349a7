"""A Google ADK agent served as it is (toolnexus/frameworks/adk.py).

The agent is the example's (examples/frameworks/adk_agent.py), on its
offline `BaseLlm`, and a copy of it that says which process ran each step
(tests/support/adk_agents.py). The adapter is driven directly for its edge
cases, then through a fleet (gunicorn front end, two Celery workers, one
Redis) and the embedded server with the official a2a-sdk client streaming.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import sys
import time
import types
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from tests.support.a2a import wait_ready
from tests.support.compose import LocalStack, local_stack
from tests.support.embedded import embedded_server
from tests.support.redis_server import ci
from toolnexus import Artifact, Ask, Checkpoint, Chunk, Data, Done, Progress
from toolnexus.frameworks import adapter_of, adk, facts_of
from toolnexus.frameworks.facts import Skill

if importlib.util.find_spec("google.adk") is None:
    # Loudly: skipped here, failed under CI=true.
    assert not ci(), "NO GOOGLE ADK: pip install 'toolnexus-serve[adk]'"
    pytest.skip("NO GOOGLE ADK: pip install 'toolnexus-serve[adk]'", allow_module_level=True)

from google.adk.agents import LlmAgent

from examples.frameworks import adk_agent as example
from tests.support import adk_agents

pytestmark = [pytest.mark.timeout(240)]


def stored(*parts: object, role: str = "user") -> dict[str, Any]:
    """A message in the stored shape the engine hands an agent function."""
    return {
        "role": role,
        "parts": [
            {"kind": "text", "text": p} if isinstance(p, str) else {"kind": "data", "data": p}
            for p in parts
        ],
    }


def drive(agent: Any = example.agent, **inputs: Any) -> list[object]:
    """What the adapter's function yields, each step run on one loop kept
    between steps, as the engine runs a generator."""
    loop = asyncio.new_event_loop()
    try:
        run = adk.run_function(agent)(**inputs)
        seen: list[object] = []
        while True:
            try:
                seen.append(loop.run_until_complete(run.__anext__()))
            except StopAsyncIteration:
                return seen
    finally:
        loop.close()


def text_of(seen: list[object]) -> str:
    return "".join(str(item.parts) for item in seen if isinstance(item, Chunk))


def data_of(progress: Progress) -> Any:
    assert isinstance(progress.message, list)
    return next(part.value for part in progress.message if hasattr(part, "value"))


# --- the adapter, driven directly ------------------------------------------


def test_an_adk_agent_is_recognized_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    assert adapter_of(example.agent) is adk
    assert not adk.recognizes(example.get_weather)
    assert not adk.recognizes(example.ScriptedModel())
    assert not adk.recognizes(lambda text: text)
    # Another package's module of that name is not ADK's.
    other = types.ModuleType("google.adk.agents")
    other.BaseAgent = type("BaseAgent", (), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "google.adk.agents", other)
    assert not adk.recognizes(example.agent)


def test_the_card_facts_are_the_agent_s_name_description_and_tools() -> None:
    facts = facts_of(example.agent)
    assert facts is not None
    assert facts.name == "concierge"
    assert facts.description == "Tells the weather and books things once you approve."
    assert facts.skills == (
        Skill("get_weather", "get_weather", "Tells the weather in a city."),
        Skill(
            "ask_for_approval",
            "ask_for_approval",
            "Asks the user to approve a request before it is carried out.",
        ),
    )
    bare = example.agent.clone(update={"description": ""})
    assert adk.facts(bare).description == example.agent.instruction


def test_text_streams_as_chunks_and_a_tool_call_as_progress() -> None:
    seen = drive(message=stored("weather in Paris"))
    called, returned = [item for item in seen if isinstance(item, Progress)]
    assert called.message[0] == "calling tool get_weather"
    assert data_of(called)["arguments"] == {"city": "Paris"}
    assert returned.message[0] == "tool get_weather returned"
    assert data_of(returned)["result"] == {"city": "Paris", "sky": "sunny", "celsius": 21}
    assert data_of(returned)["callId"] == data_of(called)["callId"]
    chunks = [item for item in seen if isinstance(item, Chunk)]
    assert len(chunks) > 5  # word by word, as the model streamed it
    assert text_of(seen) == (
        'The get_weather tool says {"celsius": 21, "city": "Paris", "sky": "sunny"}'
    )
    assert chunks[-1].last and not any(chunk.last for chunk in chunks[:-1])
    assert seen[-1] == Done()


def test_a_long_running_tool_asks_and_the_answer_is_its_response() -> None:
    asked = drive(message=stored("book a table"))
    checkpoint, question = asked[-2:]
    assert isinstance(checkpoint, Checkpoint) and isinstance(question, Ask)
    assert question.message == "Shall I go ahead with 'book a table'? (yes/no)"
    assert not any(isinstance(item, Chunk) for item in asked)  # the model waits for the answer
    state = json.loads(json.dumps(checkpoint.value))  # as the store keeps it
    answered = drive(message=stored("yes"), checkpoint=state)
    assert text_of(answered) == 'The ask_for_approval tool says {"result": "yes"}'
    as_data = drive(message=stored({"approved": False}), checkpoint=state)
    assert text_of(as_data) == 'The ask_for_approval tool says {"approved": false}'


def test_the_earlier_conversation_is_the_session_s_history() -> None:
    earlier = [stored("my name is Ada"), stored("You said: my name is Ada", role="agent")]
    seen = drive(message=stored("what is my name?"), conversation=earlier)
    assert text_of(seen) == "You said: what is my name? (before that: my name is Ada)"
    assert text_of(drive(message=stored("what is my name?"))) == "You said: what is my name?"


def test_the_model_s_error_fails_the_run_with_its_type_and_message() -> None:
    with pytest.raises(adk.AdkError) as raised:
        drive(adk_agents.agent, message=stored("fail the model is down"))
    assert type(raised.value).__name__ == "ConnectionError"
    assert str(raised.value) == "the model is down"


def test_closing_the_function_mid_stream_stops_adk_s_run() -> None:
    loop = asyncio.new_event_loop()
    try:
        run = adk.run_function(adk_agents.agent)(message=stored("count to 100"))
        first = [loop.run_until_complete(run.__anext__()) for _ in range(3)]
        assert text_of(first) == "1 2 3 "
        began = time.monotonic()
        loop.run_until_complete(run.aclose())  # what the engine does on a cancel
        assert time.monotonic() - began < 2  # not the ten seconds the count would take
        assert [task for task in asyncio.all_tasks(loop) if not task.done()] == []
    finally:
        loop.close()


def test_an_output_schema_s_answer_is_also_the_output_artifact() -> None:
    from pydantic import BaseModel

    class Forecast(BaseModel):
        city: str
        sky: str

    class JsonModel(example.ScriptedModel):
        def reply(self, llm_request: Any) -> str:
            return '{"city": "Oslo", "sky": "grey"}'

    forecaster = LlmAgent(name="forecaster", model=JsonModel(), output_schema=Forecast)
    seen = drive(forecaster, message=stored("forecast Oslo"))
    (artifact,) = [item for item in seen if isinstance(item, Artifact)]
    assert artifact.name == "output"
    assert artifact.parts == Data({"city": "Oslo", "sky": "grey"})
    assert text_of(seen) == '{"city": "Oslo", "sky": "grey"}'


# --- through the service, with the official a2a-sdk client ------------------


@dataclass
class Seen:
    """One streamed exchange, as the client read it."""

    task_id: str = ""
    context_id: str = ""
    events: list[StreamResponse] = field(default_factory=list)

    @property
    def final(self) -> Any:
        last = self.events[-1]
        if last.HasField("task"):
            return last.task.status.state
        return last.status_update.status.state

    def chunks(self) -> list[Any]:
        return [e.artifact_update for e in self.events if e.HasField("artifact_update")]

    def text(self) -> str:
        return "".join(p.text for update in self.chunks() for p in update.artifact.parts)

    def status_messages(self) -> list[list[dict[str, Any]]]:
        return [
            [MessageToDict(part) for part in e.status_update.status.message.parts]
            for e in self.events
            if e.HasField("status_update") and e.status_update.status.HasField("message")
        ]


class Peer:
    """The a2a-sdk client of one server, streaming over JSON-RPC."""

    def __init__(self, url: str) -> None:
        self.url = url

    def send(
        self, text: str, *, task_id: str = "", context_id: str = "", cancel_after: int = 0
    ) -> Seen:
        return asyncio.run(self._send(text, task_id, context_id, cancel_after))

    async def _send(self, text: str, task_id: str, context_id: str, cancel_after: int) -> Seen:
        seen = Seen(task_id=task_id, context_id=context_id)
        message = Message(
            role=Role.ROLE_USER,
            message_id=str(uuid.uuid4()),
            parts=[Part(text=text)],
            task_id=task_id,
            context_id=context_id,
        )
        async with httpx.AsyncClient(timeout=90) as http:
            card = await A2ACardResolver(http, self.url).get_agent_card()
            client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
            try:
                async for event in client.send_message(SendMessageRequest(message=message)):
                    seen.events.append(event)
                    if event.HasField("task"):
                        seen.task_id, seen.context_id = event.task.id, event.task.context_id
                    if cancel_after and len(seen.chunks()) >= cancel_after:
                        await client.cancel_task(CancelTaskRequest(id=seen.task_id))
                        cancel_after = 0  # and read on to the stream's end
            finally:
                await client.close()
        return seen


def streams_the_weather(peer: Peer) -> None:
    """Chunks in order and complete, the tool call and its result as progress."""
    seen = peer.send("weather in Paris")
    assert seen.final == TaskState.TASK_STATE_COMPLETED
    chunks = seen.chunks()
    assert len(chunks) > 5
    assert [c.append for c in chunks] == [False] + [True] * (len(chunks) - 1)
    assert [c.last_chunk for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert len({c.artifact.artifact_id for c in chunks}) == 1
    assert {c.artifact.name for c in chunks} == {"result"}
    assert (
        seen.text() == 'The get_weather tool says {"celsius": 21, "city": "Paris", "sky": "sunny"}'
    )
    messages = seen.status_messages()
    called = next(m for m in messages if m[0].get("text") == "calling tool get_weather")
    assert called[1]["data"]["arguments"] == {"city": "Paris"}
    returned = next(m for m in messages if m[0].get("text") == "tool get_weather returned")
    assert returned[1]["data"]["result"] == {"city": "Paris", "sky": "sunny", "celsius": 21}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Peer, LocalStack]]:
    """gunicorn's front end, two Celery workers (one process each) and beat on one Redis."""
    settings = {"TOOLNEXUS_RUN": "tests.support.adk_agents:agent"}
    with local_stack(tmp_path_factory.mktemp("adk"), settings) as (_, stack):
        stack.start("web")
        for name in ("worker", "worker2"):
            stack.start("worker", as_name=name, args=[f"--hostname={name}@%h", "--concurrency=1"])
        # /readyz wants the reaper running; it runs no agent: spare it ADK's import
        stack.start("beat", TOOLNEXUS_RUN="examples.agents:echo")
        try:
            wait_ready(stack.web_url, timeout=120)
            yield Peer(stack.web_url), stack
        except BaseException:
            print(stack.log_tails(60))
            raise


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_text_streams_and_the_tool_shows(fleet: tuple[Peer, LocalStack]) -> None:
    streams_the_weather(fleet[0])


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_a_long_running_tool_is_answered_by_the_other_worker(
    fleet: tuple[Peer, LocalStack],
) -> None:
    peer, stack = fleet
    asked = peer.send("book a table")
    assert asked.final == TaskState.TASK_STATE_INPUT_REQUIRED
    question = asked.status_messages()[-1][0]["text"]
    assert question.startswith("Shall I go ahead with 'book a table'?")
    asker = int(re.search(r"asked by process (\d+)", question).group(1))  # type: ignore[union-attr]
    # The worker that asked stops; only the other can take the answer.
    (name,) = [n for n, p in stack.processes.items() if _in_group(asker, p.process.pid)]
    stack.stop(name)
    try:
        answered = peer.send("yes", task_id=asked.task_id, context_id=asked.context_id)
    finally:
        stack.start("worker", as_name=name, args=[f"--hostname={name}@%h", "--concurrency=1"])
    assert answered.final == TaskState.TASK_STATE_COMPLETED
    assert answered.text().startswith('The ask_for_approval tool says {"result": "yes"}')
    taker = int(re.search(r"answered by process (\d+)", answered.text()).group(1))  # type: ignore[union-attr]
    assert taker != asker


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_a_second_task_in_the_context_remembers_the_first(
    fleet: tuple[Peer, LocalStack],
) -> None:
    peer = fleet[0]
    first = peer.send("my name is Ada")
    assert first.final == TaskState.TASK_STATE_COMPLETED
    second = peer.send("what is my name?", context_id=first.context_id)
    assert second.final == TaskState.TASK_STATE_COMPLETED and second.task_id != first.task_id
    assert second.text() == "You said: what is my name? (before that: my name is Ada)"


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_a_model_error_fails_the_task_with_its_message(
    fleet: tuple[Peer, LocalStack],
) -> None:
    seen = fleet[0].send("fail the model is down")
    assert seen.final == TaskState.TASK_STATE_FAILED
    assert seen.status_messages()[-1][0]["text"] == "ConnectionError: the model is down"


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_a_cancel_stops_the_stream(fleet: tuple[Peer, LocalStack]) -> None:
    seen = fleet[0].send("count to 200", cancel_after=3)
    assert seen.final == TaskState.TASK_STATE_CANCELED
    text = seen.text()
    assert text.startswith("1 2 3 ") and "200" not in text


def test_on_the_embedded_server_text_streams_and_the_tool_shows(tmp_path: Path) -> None:
    run = {"TOOLNEXUS_RUN": "examples.frameworks.adk_agent:agent"}
    with embedded_server(tmp_path, run) as (host, port):
        streams_the_weather(Peer(f"http://{host}:{port}/"))
        card = httpx.get(f"http://{host}:{port}/.well-known/agent-card.json", timeout=30).json()
    assert card["name"] == "concierge"
    assert card["description"] == "Tells the weather and books things once you approve."
    assert [skill["id"] for skill in card["skills"]] == ["get_weather", "ask_for_approval"]


def _in_group(pid: int, leader: int) -> bool:
    try:
        return os.getpgid(pid) == leader
    except ProcessLookupError:
        return False
