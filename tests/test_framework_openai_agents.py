"""An OpenAI Agents SDK `Agent` served as it is (toolnexus/frameworks/openai_agents.py).

The agent is the example's (examples/frameworks/openai_agents_agent.py) on
its offline model, which streams the Responses API events a real model
would. The adapter is driven directly for its edge cases, then through a
fleet (gunicorn front end, two Celery workers, one Redis) and the embedded
server with the official a2a-sdk client streaming.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import types
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
)
from google.protobuf.json_format import MessageToDict

from tests.support.redis_server import ci
from toolnexus import Artifact, Ask, Checkpoint, Chunk, Data, Done, Progress
from toolnexus.frameworks import adapter_of, facts_of, openai_agents
from toolnexus.frameworks.facts import Skill

try:
    import agents  # noqa: F401
except ImportError:  # the SDK is the extra `openai-agents`
    if ci():
        raise
    pytest.skip("NO OPENAI AGENTS SDK: pip install openai-agents", allow_module_level=True)

from examples.frameworks import openai_agents_agent as example
from tests.support.a2a import wait_ready
from tests.support.compose import LocalStack, local_stack
from tests.support.embedded import embedded_server

pytestmark = [pytest.mark.timeout(240)]

RUN = "examples.frameworks.openai_agents_agent:agent"
WEATHER = "It is sunny and 21 °C in Paris"
COMPLETED = TaskState.TASK_STATE_COMPLETED
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED


def stored(*parts: object, role: str = "user") -> dict[str, Any]:
    """A message in the stored shape the engine hands an agent function."""
    return {
        "role": role,
        "parts": [
            {"kind": "text", "text": p} if isinstance(p, str) else {"kind": "data", "data": p}
            for p in parts
        ],
    }


def drive(**inputs: Any) -> list[object]:
    """What the adapter's function yields, each step run as the engine runs
    it: its own `run_until_complete` on one loop kept between steps."""
    loop = asyncio.new_event_loop()
    try:
        run = openai_agents.run_function(example.agent)(**inputs)
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


def said(progress: Progress) -> tuple[str, Any]:
    """A progress message's text and its data part's value."""
    text, data = cast(list[Any], progress.message)
    return text, data.value


# --- the adapter, driven directly ------------------------------------------


def test_the_sdk_s_agent_is_recognized_and_nothing_else() -> None:
    assert adapter_of(example.agent) is openai_agents
    assert openai_agents.recognizes(example.forecaster)
    assert not openai_agents.recognizes(example.get_weather)
    assert not openai_agents.recognizes(lambda text: text)


def test_a_module_named_agents_that_is_not_the_sdk_is_not_taken_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    other = types.ModuleType("agents")
    other_agent = type("Agent", (), {"__module__": "agents"})
    other.Agent = other_agent  # type: ignore[attr-defined]
    other.Runner = other.RunState = other.FunctionTool = object  # type: ignore[attr-defined]
    monkeypatch.setitem(__import__("sys").modules, "agents", other)
    assert not openai_agents.recognizes(other_agent())
    assert not openai_agents.recognizes(example.agent)  # the SDK is not what `agents` is now


def test_the_card_facts_are_the_agent_s_name_instructions_and_tools() -> None:
    facts = facts_of(example.agent)
    assert facts is not None
    assert facts.name == "concierge"
    assert facts.description == example.agent.instructions
    assert facts.skills == (
        Skill("get_weather", "get_weather", "Today's weather in a city."),
        Skill(
            "book_table", "book_table", "Book a table at a restaurant; the user approves it first."
        ),
    )
    helper = openai_agents.facts(example.forecaster.clone(instructions=lambda *_: "dynamic"))
    assert helper.description == "Gives a city's forecast as data."  # instructions not a str


def test_text_streams_as_chunks_and_a_tool_call_as_progress() -> None:
    seen = drive(message=stored("weather in Paris"))
    called, returned = [item for item in seen if isinstance(item, Progress)]
    (call_text, call), (return_text, result) = said(called), said(returned)
    assert call_text == "calling tool get_weather"
    assert call["tool"] == "get_weather" and call["arguments"] == {"city": "Paris"}
    assert return_text == "tool get_weather returned"
    assert result["result"].startswith(WEATHER)
    assert result["callId"] == call["callId"]
    chunks = [item for item in seen if isinstance(item, Chunk)]
    assert len(chunks) > 5  # word by word, as the model streamed it
    assert text_of(seen) == result["result"]
    assert chunks[-1].last and not any(chunk.last for chunk in chunks[:-1])
    assert seen[-1] == Done()


def test_structured_output_is_a_data_artifact_and_its_json_is_not_streamed() -> None:
    seen = drive(message=stored("forecast Oslo"))
    assert not any(isinstance(item, Chunk) for item in seen)
    (artifact,) = [item for item in seen if isinstance(item, Artifact)]
    assert artifact.name == "output"
    assert artifact.parts == Data({"city": "Oslo", "sky": "sunny", "high_c": 21})
    assert seen[-1] == Done()


def test_an_approval_asks_and_the_answer_goes_on_from_the_saved_state() -> None:
    asked = drive(message=stored("book Chez Léon"))
    checkpoint, question = asked[-2:]
    assert isinstance(checkpoint, Checkpoint) and isinstance(question, Ask)
    assert question.message == (
        'May I call book_table({"restaurant": "Chez L\\u00e9on", "people": 2})? Answer yes or no.'
    )
    state = json.loads(json.dumps(checkpoint.value))  # as the store keeps it

    unclear = drive(message=stored("perhaps"), checkpoint=state)
    assert [type(item) for item in unclear] == [Checkpoint, Ask]
    assert unclear[0] == Checkpoint(state)  # the same question, the same state

    booked = drive(message=stored("Yes, please."), checkpoint=state)
    (returned,) = [item for item in booked if isinstance(item, Progress)]
    assert said(returned)[0] == "tool book_table returned"
    assert text_of(booked).startswith("Booked a table for 2 at Chez Léon")

    refused = drive(message=stored({"approve": False}), checkpoint=state)
    assert text_of(refused) == "Tool execution was not approved."


def test_the_earlier_conversation_is_the_run_s_message_history() -> None:
    earlier = [stored("my name is Ada"), stored("Nice to meet you, Ada.", role="agent")]
    seen = drive(message=stored("what is my name?"), conversation=earlier)
    assert text_of(seen) == "Your name is Ada."
    assert text_of(drive(message=stored("what is my name?"))) == "You have not told me."


def test_data_and_files_of_earlier_messages_reach_the_model_as_text() -> None:
    earlier = {
        "role": "agent",
        "parts": [
            {"kind": "text", "text": "Here:"},
            {"kind": "data", "data": {"high_c": 21}},
            {"kind": "file", "file": {"bytes": "aGk=", "name": "a.txt", "mimeType": "text/plain"}},
        ],
    }
    assert openai_agents._input_item(earlier) == {
        "role": "assistant",
        "content": 'Here:\n{"high_c": 21}\n[file a.txt, text/plain, 2 bytes]',
    }


def test_the_model_s_error_propagates() -> None:
    with pytest.raises(Exception, match=r"the model is down \(asked to fail\)"):
        drive(message=stored("fail now"))


def test_closing_the_function_mid_stream_stops_the_sdk_s_run() -> None:
    loop = asyncio.new_event_loop()
    try:
        run = openai_agents.run_function(example.agent)(message=stored("count to 100"))
        first = [loop.run_until_complete(run.__anext__()) for _ in range(3)]
        assert text_of(first) == "1 2 3 "
        began = time.monotonic()
        loop.run_until_complete(run.aclose())  # what the engine does on a cancel
        assert time.monotonic() - began < 2  # not the ten seconds the count would take
        leftover = [task for task in asyncio.all_tasks(loop) if not task.done()]
        assert leftover == []
    finally:
        loop.close()


# --- through the service, with the official a2a-sdk client ------------------


@dataclass
class Seen:
    """One streamed exchange, as the client read it."""

    task_id: str = ""
    context_id: str = ""
    events: list[StreamResponse] = field(default_factory=list)

    @property
    def final(self) -> TaskState:
        last = self.events[-1]
        if last.HasField("task"):
            return last.task.status.state
        return last.status_update.status.state

    def chunks(self, name: str = "result") -> list[Any]:
        return [
            e.artifact_update
            for e in self.events
            if e.HasField("artifact_update") and e.artifact_update.artifact.name == name
        ]

    def text(self) -> str:
        return "".join(p.text for u in self.chunks() for p in u.artifact.parts)

    def status_messages(self) -> list[list[Any]]:
        """Each status message's parts, as JSON (text or data)."""
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
        self, text: str, *, task_id: str = "", context_id: str = "", until_chunks: int = 0
    ) -> Seen:
        return asyncio.run(self._send(text, task_id, context_id, until_chunks))

    async def _client(self, http: httpx.AsyncClient) -> Any:
        card = await A2ACardResolver(http, self.url).get_agent_card()
        config = ClientConfig(streaming=True, httpx_client=http)
        return ClientFactory(config).create(card)

    async def _send(self, text: str, task_id: str, context_id: str, until_chunks: int) -> Seen:
        seen = Seen(task_id=task_id, context_id=context_id)
        message = Message(
            role=Role.ROLE_USER,
            message_id=str(uuid.uuid4()),
            parts=[Part(text=text)],
            task_id=task_id,
            context_id=context_id,
        )
        async with httpx.AsyncClient(timeout=60) as http:
            client = await self._client(http)
            try:
                stream: AsyncIterator[StreamResponse] = client.send_message(
                    SendMessageRequest(message=message)
                )
                async for event in stream:
                    seen.events.append(event)
                    if event.HasField("task"):
                        seen.task_id, seen.context_id = event.task.id, event.task.context_id
                    if until_chunks and len(seen.chunks()) >= until_chunks:
                        await client.cancel_task(CancelTaskRequest(id=seen.task_id))
                        until_chunks = 0  # read on to the end of the stream
            finally:
                await client.close()
        return seen

    def task(self, task_id: str) -> dict[str, Any]:
        async def get() -> dict[str, Any]:
            async with httpx.AsyncClient(timeout=30) as http:
                client = await self._client(http)
                try:
                    got = await client.get_task(GetTaskRequest(id=task_id))
                    return dict(MessageToDict(got))
                finally:
                    await client.close()

        return asyncio.run(get())


def streams_the_weather(peer: Peer) -> None:
    """Chunks in order and complete, the tool call as progress, the result."""
    seen = peer.send("weather in Paris")
    assert seen.final == COMPLETED
    chunks = seen.chunks()
    assert len(chunks) > 5
    assert [c.append for c in chunks] == [False] + [True] * (len(chunks) - 1)
    assert [c.last_chunk for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert len({c.artifact.artifact_id for c in chunks}) == 1
    assert seen.text().startswith(WEATHER)
    messages = seen.status_messages()
    called = next(m for m in messages if m[0].get("text") == "calling tool get_weather")
    assert called[1]["data"]["arguments"] == {"city": "Paris"}
    returned = next(m for m in messages if m[0].get("text") == "tool get_weather returned")
    assert returned[1]["data"]["result"] == seen.text()
    (artifact,) = peer.task(seen.task_id)["artifacts"]
    assert "".join(p["text"] for p in artifact["parts"]) == seen.text()  # the task's result


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Peer, LocalStack]]:
    """gunicorn's front end, two Celery workers (one process each) and beat
    (readiness asks that the reaper has run) on one Redis."""
    settings = {"TOOLNEXUS_RUN": RUN}
    with local_stack(tmp_path_factory.mktemp("openai-agents"), settings) as (_, stack):
        stack.start("web")
        for name in ("worker", "worker2"):
            stack.start("worker", as_name=name, args=[f"--hostname={name}@%h", "--concurrency=1"])
        stack.start("beat", TOOLNEXUS_RUN="")  # it runs no agent: spare it the SDK's import
        wait_ready(stack.web_url, timeout=180)
        try:
            yield Peer(stack.web_url), stack
        except BaseException:
            print(stack.log_tails(60))
            raise


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_text_streams_and_the_tool_shows(fleet: tuple[Peer, LocalStack]) -> None:
    streams_the_weather(fleet[0])


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_structured_output_is_a_data_artifact(
    fleet: tuple[Peer, LocalStack],
) -> None:
    seen = fleet[0].send("forecast Oslo")
    assert seen.final == COMPLETED
    assert seen.chunks() == []
    (output,) = seen.chunks("output")
    assert MessageToDict(output.artifact.parts[0])["data"] == {
        "city": "Oslo",
        "sky": "sunny",
        "high_c": 21,
    }


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_a_second_task_in_the_context_remembers_the_first(
    fleet: tuple[Peer, LocalStack],
) -> None:
    peer = fleet[0]
    first = peer.send("my name is Ada")
    assert first.final == COMPLETED
    second = peer.send("what is my name?", context_id=first.context_id)
    assert second.final == COMPLETED
    assert second.task_id != first.task_id
    assert second.text() == "Your name is Ada."


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_a_model_error_fails_the_task_with_its_message(
    fleet: tuple[Peer, LocalStack],
) -> None:
    seen = fleet[0].send("fail now")
    assert seen.final == TaskState.TASK_STATE_FAILED
    assert "the model is down (asked to fail)" in json.dumps(seen.status_messages()[-1])


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_a_cancel_stops_the_stream(fleet: tuple[Peer, LocalStack]) -> None:
    peer = fleet[0]
    seen = peer.send("count to 200", until_chunks=3)
    assert seen.final == TaskState.TASK_STATE_CANCELED
    counted = peer.task(seen.task_id).get("artifacts", [])
    text = "".join(p["text"] for a in counted for p in a["parts"])
    assert text.startswith("1 2 3 ") and not text.endswith("200 ")


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_an_approval_is_answered_by_the_other_worker(
    fleet: tuple[Peer, LocalStack],
) -> None:
    peer, stack = fleet
    asked = peer.send("book Chez Léon")
    assert asked.final == INPUT_REQUIRED
    messages = asked.status_messages()
    assert any(m[0].get("text") == "calling tool book_table" for m in messages)
    question = messages[-1][0]["text"]
    assert question.startswith("May I call book_table(")
    asker = int(re.search(r"asked by process (\d+)", asked.text()).group(1))  # type: ignore[union-attr]
    # The worker that asked stops; the answer can only be taken by the other.
    (name,) = [n for n, p in stack.processes.items() if _in_group(asker, p.process.pid)]
    stack.stop(name)  # the fleet's last test: the rest of the file needs no second worker

    answered = peer.send("yes", task_id=asked.task_id, context_id=asked.context_id)
    assert answered.final == COMPLETED
    booked = answered.text()
    assert booked.startswith("Booked a table for 2 at Chez Léon")
    taker = int(re.search(r"booked by process (\d+)", booked).group(1))  # type: ignore[union-attr]
    assert taker != asker
    messages = answered.status_messages()
    assert any(m[0].get("text") == "tool book_table returned" for m in messages)


def _in_group(pid: int, leader: int) -> bool:
    try:
        return os.getpgid(pid) == leader
    except ProcessLookupError:
        return False


def test_on_the_embedded_server_text_streams_and_the_tool_shows(tmp_path: Path) -> None:
    with embedded_server(tmp_path, {"TOOLNEXUS_RUN": RUN}) as (host, port):
        streams_the_weather(Peer(f"http://{host}:{port}/"))
