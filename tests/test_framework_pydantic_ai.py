"""A Pydantic AI `Agent` served as it is (toolnexus/frameworks/pydantic_ai.py).

Through the real service, with the official a2a-sdk client streaming: a
fleet (gunicorn's front end, two Celery workers and beat on a private
Redis) and, for the streaming itself, the embedded server too. The agent
(tests/support/pydantic_ai_agents.py) runs on Pydantic AI's offline
`FunctionModel`. The adapter is also driven directly, each step in a task of
its own as the engine drives it, for what needs no server.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import CancelTaskRequest, Message, Part, Role, SendMessageRequest
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value
from pydantic_ai import Agent, ApprovalRequired, CallDeferred, RunContext
from pydantic_ai.models.test import TestModel

from examples.frameworks import pydantic_ai_agent as example
from tests.support import pydantic_ai_agents
from tests.support.a2a import wait_ready
from tests.support.compose import LocalStack, ServiceProcess, local_stack
from tests.support.embedded import ROOT, embedded_server
from tests.support.polling import wait_for
from toolnexus import Artifact, Ask, Checkpoint, Chunk, Data, Done, Progress
from toolnexus.frameworks import adapter_of, facts_of
from toolnexus.frameworks import pydantic_ai as adapter

pytestmark = pytest.mark.timeout(180)

AGENT = "tests.support.pydantic_ai_agents:agent"
COMPLETED = "TASK_STATE_COMPLETED"


# --- the service -------------------------------------------------------------


@dataclass
class Fleet:
    stack: LocalStack
    workers: list[ServiceProcess] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.stack.web_url


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("pydantic-ai-fleet")
    # The agent is a test module's: every process imports it from the repository.
    importable = {"PYTHONPATH": str(ROOT)}
    with local_stack(folder, {"TOOLNEXUS_RUN": AGENT}) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1", **importable)
        fleet = Fleet(stack)
        for name in ("worker-a", "worker-b"):
            args = [f"--hostname={name}@%h"]
            fleet.workers.append(stack.start("worker", as_name=name, args=args, **importable))
        # /readyz wants the reaper running; beat runs no agent, so it is
        # spared importing Pydantic AI.
        stack.start("beat", TOOLNEXUS_RUN="examples.agents:echo")
        wait_ready(stack.web_url, timeout=120)
        yield fleet


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("pydantic-ai-embedded")
    with embedded_server(folder, {"TOOLNEXUS_RUN": AGENT}) as (host, port):
        yield f"http://{host}:{port}"


@pytest.fixture(params=["fleet", "embedded"])
def served(request: pytest.FixtureRequest) -> str:
    if request.param == "fleet":
        return str(request.getfixturevalue("fleet").url)
    return str(request.getfixturevalue("embedded"))


@dataclass
class Turn:
    """What one streamed SendMessage brought, as 1.0 JSON dicts."""

    events: list[dict[str, Any]]

    @property
    def task_id(self) -> str:
        first = self.events[0]
        return str(first["task"]["id"] if "task" in first else first["statusUpdate"]["taskId"])

    @property
    def context_id(self) -> str:
        first = self.events[0]
        update = first["task"] if "task" in first else first["statusUpdate"]
        return str(update["contextId"])

    @property
    def state(self) -> str:
        return str(self.statuses()[-1]["state"])

    def statuses(self) -> list[dict[str, Any]]:
        return [e["statusUpdate"]["status"] for e in self.events if "statusUpdate" in e]

    def chunks(self, name: str = "result") -> list[dict[str, Any]]:
        updates = [e["artifactUpdate"] for e in self.events if "artifactUpdate" in e]
        return [u for u in updates if u["artifact"].get("name") == name]

    def text(self) -> str:
        return "".join(p.get("text", "") for c in self.chunks() for p in c["artifact"]["parts"])

    def progress(self) -> list[tuple[str, Any]]:
        """Each working status message with a data part: (its text, its data)."""
        found = []
        for status in self.statuses():
            parts = status.get("message", {}).get("parts", [])
            if status["state"] == "TASK_STATE_WORKING" and len(parts) == 2:
                found.append((parts[0]["text"], parts[1]["data"]))
        return found

    def said(self) -> str:
        """The text of the last status message (a question, a failure)."""
        parts = self.statuses()[-1].get("message", {}).get("parts", [])
        return "".join(part.get("text", "") for part in parts)


# Called with the client and what the stream brought so far after each event;
# gives back the watcher for the next event (None: stop watching).
Watch = Callable[[Any, Turn], Awaitable[Any]]


def send(
    url: str,
    text: str | None = None,
    *,
    data: dict[str, Any] | None = None,
    reply_to: Turn | None = None,
    context_id: str | None = None,
    watch: Watch | None = None,
) -> Turn:
    """One message streamed to its end with the a2a-sdk client: a text (or a
    data part), to a new task (in `context_id`) or answering `reply_to`'s."""
    message = Message(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        parts=[Part(text=text) if data is None else Part(data=ParseDict(data, Value()))],
    )
    if reply_to is not None:
        message.task_id = reply_to.task_id
        message.context_id = reply_to.context_id
    elif context_id is not None:
        message.context_id = context_id
    return asyncio.run(_exchange(url, message, watch))


async def _exchange(url: str, message: Message, watch: Watch | None) -> Turn:
    async with httpx.AsyncClient(timeout=60) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        events: list[dict[str, Any]] = []
        try:
            async for event in client.send_message(SendMessageRequest(message=message)):
                events.append(MessageToDict(event))
                if watch is not None:
                    watch = await watch(client, Turn(events))
        finally:
            await client.close()
    return Turn(events)


# --- through the service -------------------------------------------------------


def test_the_model_s_text_streams_as_chunks_of_one_artifact(served: str) -> None:
    turn = send(served, "count 12 0")

    chunks = turn.chunks()
    assert turn.text() == "".join(f"{n} " for n in range(1, 13))
    assert [c["artifact"]["parts"][0]["text"] for c in chunks[:-1]] == [
        f"{n} " for n in range(1, 13)
    ]
    assert [c.get("append", False) for c in chunks] == [False] + [True] * 12
    assert [c.get("lastChunk", False) for c in chunks] == [False] * 12 + [True]
    assert len({c["artifact"]["artifactId"] for c in chunks}) == 1
    assert turn.state == COMPLETED


def test_a_tool_call_and_its_result_are_progress(fleet: Fleet) -> None:
    turn = send(fleet.url, "add 2 3")

    assert turn.progress() == [
        ("calling tool add", {"tool": "add", "callId": "add-1", "arguments": {"a": 2.0, "b": 3.0}}),
        ("tool add returned", {"tool": "add", "callId": "add-1", "result": 5.0}),
    ]
    assert turn.text() == "add gave 5"
    assert turn.state == COMPLETED


def test_typed_output_is_a_data_artifact(fleet: Fleet) -> None:
    turn = send(fleet.url, "forecast Paris")

    (output,) = turn.chunks("output")
    assert output["artifact"]["parts"] == [{"data": {"city": "Paris", "degrees": 21.0}}]
    assert turn.chunks() == []  # no text was streamed
    assert turn.state == COMPLETED


def test_a_follow_up_task_in_the_context_continues_the_conversation(fleet: Fleet) -> None:
    first = send(fleet.url, "my name is Ada")
    assert first.text() == "echo: my name is Ada"

    second = send(fleet.url, "recall", context_id=first.context_id)

    assert second.task_id != first.task_id
    assert second.text() == "you said: my name is Ada"


def test_a_framework_error_fails_the_task_with_its_message(fleet: Fleet) -> None:
    turn = send(fleet.url, "fail")

    assert turn.state == "TASK_STATE_FAILED"
    assert "the model is out of order" in turn.said()


def test_cancel_stops_the_run_mid_stream(fleet: Fleet) -> None:
    marks = fleet.stack.folder / f"count-{uuid.uuid4().hex}"

    async def cancel_after_three_chunks(client: Any, seen: Turn) -> Watch | None:
        if len(seen.chunks()) < 3:
            return cancel_after_three_chunks
        await client.cancel_task(CancelTaskRequest(id=seen.task_id))
        return None

    turn = send(fleet.url, f"count 400 0.05 {marks}", watch=cancel_after_three_chunks)

    assert turn.state == "TASK_STATE_CANCELED"
    # The model's stream was closed, not left running: it marked where it stopped.
    wait_for(lambda: marks.read_text() == "stopped", timeout=15, what="the model's stream to close")
    assert len(turn.chunks()) < 400


def test_the_card_is_the_agent_s_name_instructions_and_tools(fleet: Fleet) -> None:
    async def card() -> Any:
        async with httpx.AsyncClient(timeout=60) as http:
            return await A2ACardResolver(http, fleet.url).get_agent_card()

    read = asyncio.run(card())

    assert read.name == "pydantic-ai-test-agent"
    assert read.description == "You count, add, delete, recall and forecast."
    assert [(s.id, s.description) for s in read.skills] == [
        ("add", "Add two numbers."),
        ("delete", "Delete a thing, once the user approves."),
    ]


def test_an_approval_is_asked_and_answered_on_another_worker(fleet: Fleet) -> None:
    asked = send(fleet.url, "delete report")

    assert asked.state == "TASK_STATE_INPUT_REQUIRED"
    assert asked.said().startswith("Approve delete with ")
    assert asked.said().endswith("Answer yes or no.")
    ((calling, call),) = asked.progress()
    assert calling == "calling tool delete"
    asked_in = int(call["arguments"]["asked_in"])
    # The worker that asked goes away: the answer can only run on the other one.
    (asker,) = [w for w in fleet.workers if os.getpgid(asked_in) == w.process.pid]
    assert asker.stop() is not None

    answered = send(fleet.url, data={"approve": True}, reply_to=asked)

    assert answered.task_id == asked.task_id
    assert answered.state == COMPLETED
    assert [text for text, _ in answered.progress()] == [
        "calling tool delete",
        "tool delete returned",
    ]
    prefix = f"delete gave deleted report, asked in {asked_in}, run in "
    assert answered.text().startswith(prefix)
    run_in = int(answered.text().removeprefix(prefix))
    (other,) = [w for w in fleet.workers if w is not asker]
    assert run_in != asked_in and os.getpgid(run_in) == other.process.pid


# --- the adapter, driven directly ----------------------------------------------


def text_message(text: str, message_id: str = "m-1") -> dict[str, Any]:
    return {"role": "user", "messageId": message_id, "parts": [{"kind": "text", "text": text}]}


def data_message(value: Any, message_id: str = "m-2") -> dict[str, Any]:
    return {"role": "user", "messageId": message_id, "parts": [{"kind": "data", "data": value}]}


def drive(agent: Agent[Any, Any], message: str | dict[str, Any], **inputs: Any) -> list[object]:
    """Everything the adapter yields for one run, each step in an asyncio
    task of its own on one loop, as the engine runs an async generator."""
    if isinstance(message, str):
        message = text_message(message)
    run = adapter.run_function(agent)(message=message, **inputs)
    loop = asyncio.new_event_loop()
    items: list[object] = []
    try:
        while True:
            try:
                items.append(loop.run_until_complete(loop.create_task(_next(run))))
            except StopAsyncIteration:
                return items
    finally:
        loop.run_until_complete(loop.create_task(_close(run)))
        loop.close()


async def _next(run: AsyncIterator[object]) -> object:
    return await anext(run)


async def _close(run: Any) -> None:
    await run.aclose()


def chunked_text(items: list[object]) -> str:
    return "".join(str(i.parts) for i in items if isinstance(i, Chunk))


def test_an_agent_is_recognized_and_a_function_is_not() -> None:
    assert adapter.recognizes(pydantic_ai_agents.agent)
    assert adapter_of(pydantic_ai_agents.agent) is adapter
    assert not adapter.recognizes(pydantic_ai_agents.model)
    assert adapter_of(pydantic_ai_agents.model) is None


def test_facts_name_the_agent_its_instructions_and_a_skill_per_tool() -> None:
    facts = facts_of(example.agent)

    assert facts is not None
    assert (facts.name, facts.description) == ("notes", "You count words and keep notes.")
    assert [(s.id, s.name, s.description) for s in facts.skills] == [
        ("count_words", "count_words", "Count the words of a text."),
        ("delete_note", "delete_note", "Delete a note (asks the user first)."),
    ]
    prompted = Agent(TestModel(), system_prompt="Be brief.", instructions="Answer in French.")
    assert adapter.facts(prompted).description == "Answer in French.\n\nBe brief."
    described = Agent(TestModel(), description="Says hello.", instructions="Answer in French.")
    assert adapter.facts(described).description == "Says hello."


def test_the_private_names_the_adapter_reads_are_still_there() -> None:
    # Pydantic AI has no public reader for these: the adapter reads them.
    agent = Agent(TestModel(), system_prompt="Be brief.", instructions="Answer in French.")
    assert agent._system_prompts == ("Be brief.",)
    assert [each.instruction for each in agent._instructions] == ["Answer in French."]
    assert agent._output_validators == []
    agent.output_validator(lambda text: text)
    assert adapter._output_type_with_deferred(agent) is None


def test_test_model_text_and_tool_calls() -> None:
    agent = Agent(TestModel(custom_output_text="it is sunny today"))

    @agent.tool_plain
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    items = drive(agent, "weather?")

    progress = [i for i in items if isinstance(i, Progress)]
    assert [p.message[0] for p in progress] == ["calling tool weather", "tool weather returned"]
    assert chunked_text(items) == "it is sunny today"
    assert items[-2:] == [Chunk("", last=True), Done()]


def test_test_model_structured_output() -> None:
    agent = Agent(TestModel(), output_type=pydantic_ai_agents.Forecast)

    items = drive(agent, "forecast")

    assert items == [Artifact(Data({"city": "a", "degrees": 0}), name="output"), Done()]


def test_the_example_counts_and_asks_before_deleting() -> None:
    counted = drive(example.agent, "count three little words")
    assert chunked_text(counted) == "count_words says: 3 "

    asked = drive(example.agent, "delete groceries")
    checkpoint, question = asked[-2:]
    assert isinstance(checkpoint, Checkpoint) and isinstance(question, Ask)
    assert question.message == 'Approve delete_note with {"title": "groceries"}?\nAnswer yes or no.'
    assert checkpoint.value["approvals"] == ["d1"]

    done = drive(example.agent, text_message("yes", "m-2"), checkpoint=checkpoint.value)
    assert chunked_text(done) == "delete_note says: note 'groceries' deleted "


def ask_to_delete() -> Checkpoint:
    items = drive(pydantic_ai_agents.agent, "delete draft")
    checkpoint = items[-2]
    assert isinstance(checkpoint, Checkpoint)
    return checkpoint


def returned(items: list[object]) -> Any:
    (result,) = [
        i.message[1].value["result"]
        for i in items
        if isinstance(i, Progress) and i.message[0] == "tool delete returned"
    ]
    return result


def test_an_answer_approves_on_yes_and_denies_otherwise_with_its_reason() -> None:
    state = ask_to_delete().value
    agent = pydantic_ai_agents.agent

    def answered(message: dict[str, Any]) -> Any:
        return returned(drive(agent, message, checkpoint=state))

    assert answered(text_message("Yes", "m-2")).startswith("deleted draft")
    assert answered(data_message({"approve": True})).startswith("deleted draft")
    assert answered(data_message({"approve": {"delete-1": True}})).startswith("deleted draft")
    assert answered(text_message("No.", "m-2")) == "The tool call was denied."
    assert answered(text_message("keep it, please", "m-2")) == "keep it, please"
    assert answered(data_message({"approve": False, "reason": "not today"})) == "not today"


def test_a_tool_that_raises_approval_required_asks_too() -> None:
    agent = Agent(TestModel())

    @agent.tool
    def wipe(ctx: RunContext[None], disk: str) -> str:
        """Wipe a disk."""
        if not ctx.tool_call_approved:
            raise ApprovalRequired
        return f"wiped {disk}"

    asked = drive(agent, "wipe it")
    checkpoint, question = asked[-2:]
    assert question == Ask('Approve wipe with {"disk": "a"}?\nAnswer yes or no.')
    assert isinstance(checkpoint, Checkpoint)

    answered = drive(agent, text_message("yes", "m-2"), checkpoint=checkpoint.value)

    assert (
        Progress(["tool wipe returned", Data({"tool": "wipe", "callId": ANY, "result": "wiped a"})])
        in answered
    )


def test_a_call_deferred_for_an_external_result_takes_the_answer_as_its_result() -> None:
    agent = Agent(TestModel())

    @agent.tool_plain
    def lookup(key: str) -> str:
        """Look a key up elsewhere."""
        raise CallDeferred

    asked = drive(agent, "look it up")
    checkpoint, question = asked[-2:]
    assert question == Ask('The agent waits for the result of lookup with {"key": "a"}.')
    assert isinstance(checkpoint, Checkpoint)
    (call_id,) = checkpoint.value["calls"]

    def result(message: dict[str, Any]) -> Any:
        answered = drive(agent, message, checkpoint=checkpoint.value)
        (data,) = [
            i.message[1].value
            for i in answered
            if isinstance(i, Progress) and i.message[0] == "tool lookup returned"
        ]
        return data["result"]

    assert result(text_message("seven", "m-2")) == "seven"
    assert result(data_message({"results": {call_id: 7}})) == 7
    assert result(data_message({"value": 7})) == {"value": 7}


def test_another_attempt_of_the_run_that_asked_asks_again() -> None:
    checkpoint = ask_to_delete()

    again = drive(pydantic_ai_agents.agent, "delete draft", checkpoint=checkpoint.value)

    assert again == [checkpoint, Ask(checkpoint.value["question"])]


def test_the_conversation_becomes_the_message_history() -> None:
    conversation = [
        {"role": "user", "parts": [{"kind": "text", "text": "my name is Ada"}]},
        {"role": "agent", "parts": [{"kind": "text", "text": "echo: my name is Ada"}]},
        {"role": "user", "parts": [{"kind": "data", "data": {"city": "Oslo"}}]},
    ]

    items = drive(pydantic_ai_agents.agent, "recall", conversation=conversation)

    assert chunked_text(items) == 'you said: my name is Ada | {"city": "Oslo"}'


def test_closing_the_generator_stops_the_run(tmp_path: Path) -> None:
    marks = tmp_path / "count"
    message = text_message(f"count 100 0.05 {marks}")
    run = adapter.run_function(pydantic_ai_agents.agent)(message=message)
    loop = asyncio.new_event_loop()
    try:
        for _ in range(2):
            loop.run_until_complete(loop.create_task(_next(run)))
        loop.run_until_complete(loop.create_task(_close(run)))
        assert marks.read_text() == "stopped"
        assert [t for t in asyncio.all_tasks(loop) if not t.done()] == []
    finally:
        loop.close()
