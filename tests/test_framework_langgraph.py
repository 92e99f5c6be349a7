"""A compiled LangGraph graph served as it is (toolnexus/frameworks/langgraph.py).

The graphs run on LangChain's offline `GenericFakeChatModel`, scripted:
the example's (examples/frameworks/langgraph_agent.py) and a test graph
built on it (tests/support/langgraph_graph.py) that can also fail, stream
slowly and ask back writing down which process asked and which answered.
The adapter is driven directly for its edge cases, then through a fleet
(gunicorn front end, two Celery workers, one Redis) and the embedded server
with the official a2a-sdk client streaming.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx
import pytest
import requests
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import CancelTaskRequest, Message, Part, Role, SendMessageRequest, StreamResponse
from google.protobuf.json_format import MessageToDict

from tests.support.redis_server import ci
from toolnexus import Artifact, Ask, Checkpoint, Chunk, Data, Done, Progress
from toolnexus.frameworks import adapter_of, facts_of, langgraph
from toolnexus.frameworks.facts import Skill
from worker.engine.calling import run_async

try:
    import langgraph as _installed  # noqa: F401
except ImportError:  # the [langgraph] extra is not installed
    if ci():
        raise
    pytest.skip("NO LANGGRAPH: pip install 'toolnexus-serve[langgraph]'", allow_module_level=True)

from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.func import entrypoint
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict

from examples.frameworks import langgraph_agent as example
from tests.support import langgraph_graph as test_graph
from tests.support.compose import LocalStack, local_stack
from tests.support.embedded import embedded_server
from tests.support.polling import wait_for
from toolnexus.frameworks.langgraph_saver import JsonSaver

pytestmark = [pytest.mark.timeout(300)]

WEATHER = "The weather: sunny and 21 °C in Paris."
COMPLETED = "TASK_STATE_COMPLETED"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"


def stored(*parts: object, role: str = "user") -> dict[str, Any]:
    """A message in the stored shape the engine hands an agent function."""
    return {
        "role": role,
        "parts": [
            {"kind": "text", "text": p} if isinstance(p, str) else {"kind": "data", "data": p}
            for p in parts
        ],
    }


def drive(graph: Any, stop_after: int | None = None, **inputs: Any) -> list[object]:
    """What the adapter's function yields, each step run as the engine runs
    it (`run_async`: a task of its own on the thread's loop); closed after
    `stop_after` items as a cancel closes it."""
    inputs.setdefault("task", {"id": uuid.uuid4().hex})
    run = langgraph.run_function(graph)(**inputs)
    seen: list[object] = []
    try:
        while stop_after is None or len(seen) < stop_after:
            try:
                seen.append(run_async(run.__anext__()))
            except StopAsyncIteration:
                break
    finally:
        run_async(run.aclose())
    return seen


def text_of(seen: list[object]) -> str:
    return "".join(str(item.parts) for item in seen if isinstance(item, Chunk))


def data_of(progress: Progress) -> Any:
    assert isinstance(progress.message, list)
    return next(part.value for part in progress.message if isinstance(part, Data))


def outputs_of(seen: list[object]) -> list[Any]:
    return [item.parts.value for item in seen if hasattr(item, "name") and item.name == "output"]


# --- the adapter, driven directly ------------------------------------------


def test_a_compiled_graph_is_recognized_and_nothing_else() -> None:
    @entrypoint()
    def shout(text: str) -> str:
        return text.upper()

    assert adapter_of(example.agent) is langgraph
    assert langgraph.recognizes(shout)  # the functional API's graph is a Pregel too
    assert not langgraph.recognizes(example.builder)  # not compiled yet
    assert not langgraph.recognizes(example.get_weather)
    assert not langgraph.recognizes(lambda text: text)


def test_the_card_facts_are_the_graph_s_name_and_its_tool_node_s_tools() -> None:
    facts = facts_of(example.agent)
    assert facts is not None
    assert facts.name == "weather-and-bookings"
    assert facts.skills == (Skill("get_weather", "get_weather", "Today's weather in a city."),)
    # LangGraph names every graph "LangGraph": no name worth a card.
    assert langgraph.facts(example.builder.compile()).name is None


def test_text_streams_as_chunks_a_tool_call_as_progress_and_the_state_as_output() -> None:
    seen = drive(example.agent, message=stored("weather in Paris"))
    called, returned = [item for item in seen if isinstance(item, Progress)]
    assert called.message[0] == "calling tool get_weather"  # type: ignore[index]
    assert data_of(called)["arguments"] == {"city": "Paris"}
    assert returned.message[0] == "tool get_weather returned"  # type: ignore[index]
    assert data_of(returned)["result"] == "sunny and 21 °C in Paris"
    assert data_of(returned)["callId"] == data_of(called)["callId"]
    chunks = [item for item in seen if isinstance(item, Chunk)]
    assert len(chunks) > 5  # word by word, as the model streamed it
    assert text_of(seen) == WEATHER
    assert chunks[-1].last and not any(chunk.last for chunk in chunks[:-1])
    assert outputs_of(seen) == [{"city": "Paris"}]  # the state but its messages
    assert seen[-1] == Done()  # the streamed artifact is the result


def test_an_interrupt_asks_and_the_answer_resumes_from_the_checkpoint_alone() -> None:
    task = {"id": uuid.uuid4().hex}
    asked = drive(example.agent, message=stored("book a table"), task=task)
    saved, question = asked[-2:]
    assert question == Ask("Shall I book a table? Say yes or no.")
    assert isinstance(saved, Checkpoint)
    # As the store keeps it: JSON, read by another process's fresh saver.
    state = json.loads(json.dumps(saved.value))

    answered = drive(example.agent, message=stored("yes"), task=task, checkpoint=state)

    assert text_of(answered) == "Booked: a table."
    assert outputs_of(answered) == [{"booking": "a table"}]
    declined = drive(example.agent, message=stored("no"), task=task, checkpoint=state)
    assert text_of(declined) == "Nothing booked."


def test_a_data_part_answers_an_interrupt_with_its_value() -> None:
    task = {"id": uuid.uuid4().hex}
    asked = drive(test_graph.graph, message=stored("colour?"), task=task)
    saved, question = asked[-2:]
    assert isinstance(saved, Checkpoint) and isinstance(question, Ask)
    # A question that is not text is asked as its JSON.
    assert json.loads(str(question.message))["question"] == "Which colour?"

    answered = drive(
        test_graph.graph, message=stored({"hue": 200}), task=task, checkpoint=saved.value
    )

    assert outputs_of(answered)[0]["colour"] == {"hue": 200}


class Answers(TypedDict, total=False):
    answers: Annotated[list[Any], operator.add]
    n: int


def test_interrupts_waiting_at_once_are_asked_one_after_another() -> None:
    def left(state: Answers) -> Answers:
        return {"answers": [["left", interrupt("left?")]]}

    def right(state: Answers) -> Answers:
        return {"answers": [["right", interrupt("right?")]]}

    builder = StateGraph(Answers)
    builder.add_node("left", left)
    builder.add_node("right", right)
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    graph, task = builder.compile(), {"id": uuid.uuid4().hex}
    first = drive(graph, message=stored({"n": 1}), task=task)
    assert first[-1] == Ask("left?")
    second = drive(graph, message=stored("L"), task=task, checkpoint=first[-2].value)
    assert second[-1] == Ask("right?")
    last = drive(graph, message=stored("R"), task=task, checkpoint=second[-2].value)
    assert outputs_of(last) == [{"n": 1, "answers": [["left", "L"], ["right", "R"]]}]


def test_a_static_breakpoint_asks_to_go_on_and_any_answer_resumes() -> None:
    builder = StateGraph(Answers)
    builder.add_node("one", lambda state: {"n": state["n"] + 1})
    builder.add_node("two", lambda state: {"n": state["n"] * 10})
    builder.add_edge(START, "one")
    builder.add_edge("one", "two")
    graph, task = builder.compile(interrupt_before=["two"]), {"id": uuid.uuid4().hex}
    asked = drive(graph, message=stored({"n": 1}), task=task)
    assert isinstance(asked[-1], Ask) and "go on" in str(asked[-1].message)
    went_on = drive(graph, message=stored("ok"), task=task, checkpoint=asked[-2].value)
    assert outputs_of(went_on) == [{"answers": [], "n": 20}]


class Counted(TypedDict, total=False):
    n: int
    name: str


def test_an_interrupt_inside_a_subgraph_resumes_it_where_it_stopped() -> None:
    def count(state: Counted) -> Counted:
        return {"n": state["n"] + 1}

    def ask(state: Counted) -> Counted:
        return {"name": interrupt("name?")}

    inner = StateGraph(Counted)
    inner.add_node("count", count)
    inner.add_node("ask", ask)
    inner.add_edge(START, "count")
    inner.add_edge("count", "ask")
    outer = StateGraph(Counted)
    outer.add_node("before", count)
    outer.add_node("inner", inner.compile())
    outer.add_node("after", count)
    outer.add_edge(START, "before")
    outer.add_edge("before", "inner")
    outer.add_edge("inner", "after")
    graph, task = outer.compile(), {"id": uuid.uuid4().hex}
    asked = drive(graph, message=stored({"n": 0}), task=task)
    assert asked[-1] == Ask("name?")
    answered = drive(graph, message=stored("Ada"), task=task, checkpoint=asked[-2].value)
    # Each count ran once: the subgraph went on from its own checkpoint.
    assert outputs_of(answered) == [{"n": 3, "name": "Ada"}]


def joined(value: list[str] | None, writes: list[list[str]]) -> list[str]:
    return [*(value or []), *(item for write in writes for item in write)]


class Log(TypedDict, total=False):
    # A delta channel (beta in LangGraph) keeps only each step's writes.
    log: Annotated[list[str], DeltaChannel(joined)]


def test_a_graph_with_a_delta_channel_keeps_its_whole_history_in_the_checkpoint() -> None:
    builder = StateGraph(Log)
    builder.add_node("a", lambda state: {"log": ["a"]})
    builder.add_node("ask", lambda state: {"log": [interrupt("more?")]})
    builder.add_edge(START, "a")
    builder.add_edge("a", "ask")
    graph, task = builder.compile(), {"id": uuid.uuid4().hex}
    asked = drive(graph, message=stored({"log": ["start"]}), task=task)
    assert len(asked[-2].value["langgraph"]["checkpoints"]) > 1
    answered = drive(graph, message=stored("end"), task=task, checkpoint=asked[-2].value)
    # Rebuilt from every step's writes, not only the last checkpoint's.
    assert outputs_of(answered) == [{"log": ["start", "a", "end"]}]


def test_the_conversation_is_given_as_the_graph_s_earlier_messages() -> None:
    conversation = [stored("hello"), stored("You said: hello", role="agent")]
    seen = drive(example.agent, message=stored("again"), conversation=conversation)
    assert text_of(seen) == "You said: again Before that: hello"


def test_a_graph_without_messages_takes_a_data_part_and_gives_its_state() -> None:
    class Numbers(TypedDict, total=False):
        a: int
        doubled: int

    builder = StateGraph(Numbers)
    builder.add_node("double", lambda state: {"doubled": state["a"] * 2})
    builder.add_edge(START, "double")
    seen = drive(builder.compile(), message=stored({"a": 21}))
    assert outputs_of(seen) == [{"a": 21, "doubled": 42}]

    @entrypoint()
    def shout(text: str) -> str:
        return text.upper()

    assert drive(shout, message=stored("hi")) == [Done(artifacts=[Artifact("HI", name="result")])]


def test_closing_the_run_stops_the_graph_at_once() -> None:
    test_graph.STOPPED.clear()
    seen = drive(test_graph.graph, stop_after=5, message=stored("slow"))
    assert len(seen) == 5
    # Closed at a yield, the model's stream was cancelled within the close.
    assert test_graph.STOPPED == ["slow"]


def test_a_model_error_propagates_with_its_message() -> None:
    with pytest.raises(RuntimeError, match=test_graph.FAILURE):
        drive(test_graph.graph, message=stored("fail"))


def test_the_graph_runs_on_the_adapter_s_checkpointer_not_the_one_compiled_in() -> None:
    # `Pregel.copy(update=...)` is how the adapter lends a graph its saver.
    own = InMemorySaver()
    graph = example.builder.compile(checkpointer=own)
    asked = drive(graph, message=stored("book a table"))
    assert isinstance(asked[-1], Ask)
    assert list(own.list(None)) == []
    saved = asked[-2]
    assert isinstance(saved, Checkpoint)
    assert isinstance(JsonSaver.load(saved.value["langgraph"]), JsonSaver)


def test_the_saved_checkpoint_keeps_only_the_latest_step() -> None:
    asked = drive(example.agent, message=stored("book a table"))
    saved = asked[-2]
    assert isinstance(saved, Checkpoint)
    dumped = saved.value["langgraph"]
    assert [c["ns"] for c in dumped["checkpoints"]] == [""]
    full = JsonSaver.load(dumped).dump(latest_only=False)
    assert full == dumped


# --- through the service, with the official a2a-sdk client ------------------


@dataclass
class Exchange:
    """One message sent and its stream read to the end, as the client saw it
    (each event as JSON)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    task_id: str = ""
    context_id: str = ""

    @property
    def state(self) -> str:
        last = self.events[-1]
        status = last["task"]["status"] if "task" in last else last["statusUpdate"]["status"]
        return str(status["state"])

    def chunks(self, name: str = "result") -> list[dict[str, Any]]:
        updates = (e["artifactUpdate"] for e in self.events if "artifactUpdate" in e)
        return [u for u in updates if u["artifact"].get("name") == name]

    def text(self) -> str:
        return "".join(p.get("text", "") for u in self.chunks() for p in u["artifact"]["parts"])

    def output(self) -> Any:
        (update,) = self.chunks("output")
        return update["artifact"]["parts"][0]["data"]

    def status_messages(self) -> list[list[dict[str, Any]]]:
        updates = (e["statusUpdate"]["status"] for e in self.events if "statusUpdate" in e)
        return [status["message"]["parts"] for status in updates if "message" in status]


class Peer:
    """The a2a-sdk client of one server, streaming over JSON-RPC."""

    def __init__(self, url: str) -> None:
        self.url = url

    def send(
        self, *parts: Part, task_id: str = "", context_id: str = "", cancel_at: int = 0
    ) -> Exchange:
        """Send `parts`; with `cancel_at`, cancel the task once that many
        chunks have come, and read on to the stream's end."""
        return asyncio.run(self._send(list(parts), task_id, context_id, cancel_at))

    async def _send(
        self, parts: list[Part], task_id: str, context_id: str, cancel_at: int
    ) -> Exchange:
        seen = Exchange(task_id=task_id, context_id=context_id)
        message = Message(
            role=Role.ROLE_USER,
            message_id=uuid.uuid4().hex,
            parts=parts,
            task_id=task_id,
            context_id=context_id,
        )
        async with httpx.AsyncClient(timeout=60) as http:
            card = await A2ACardResolver(http, self.url).get_agent_card()
            config = ClientConfig(
                streaming=True, supported_protocol_bindings=["JSONRPC"], httpx_client=http
            )
            client = ClientFactory(config).create(card)
            try:
                stream: AsyncIterator[StreamResponse] = client.send_message(
                    SendMessageRequest(message=message)
                )
                async for event in stream:
                    seen.events.append(MessageToDict(event))
                    if event.HasField("task"):
                        seen.task_id, seen.context_id = event.task.id, event.task.context_id
                    if cancel_at and len(seen.chunks()) >= cancel_at:
                        await client.cancel_task(CancelTaskRequest(id=seen.task_id))
                        cancel_at = 0
            finally:
                await client.close()
        return seen


def text(value: str) -> Part:
    return Part(text=value)


def streams_the_weather(peer: Peer) -> None:
    """Chunks in order and complete, the tool call as progress, the state as output."""
    seen = peer.send(text("weather in Paris"))
    assert seen.state == COMPLETED, seen.events
    chunks = seen.chunks()
    assert len(chunks) > 5
    assert [c.get("append", False) for c in chunks] == [False] + [True] * (len(chunks) - 1)
    assert [c.get("lastChunk", False) for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert len({c["artifact"]["artifactId"] for c in chunks}) == 1
    assert seen.text() == WEATHER
    messages = seen.status_messages()
    called = next(m for m in messages if m[0].get("text") == "calling tool get_weather")
    assert called[1]["data"]["arguments"] == {"city": "Paris"}
    returned = next(m for m in messages if m[0].get("text") == "tool get_weather returned")
    assert returned[1]["data"]["result"] == "sunny and 21 °C in Paris"
    assert seen.output() == {"city": "Paris"}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Peer, LocalStack]]:
    """gunicorn's front end and two Celery workers (one pool process each) on one Redis."""
    settings = {"TOOLNEXUS_RUN": "tests.support.langgraph_graph:graph"}
    with local_stack(tmp_path_factory.mktemp("langgraph"), settings) as (_, stack):
        stack.start("web")
        for name in WORKERS:
            start_worker(stack, name)
        wait_for(lambda: healthy(stack.web_url), timeout=180, what="the front end to answer")
        try:
            yield Peer(stack.web_url), stack
        except BaseException:
            print(stack.log_tails(60))
            raise


WORKERS = ("worker", "worker2")


def healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=2).ok
    except requests.RequestException:
        return False


def start_worker(stack: LocalStack, name: str) -> None:
    stack.start("worker", as_name=name, args=[f"--hostname={name}@%h", "--concurrency=1"])


def worker_running(stack: LocalStack, pid: float) -> str:
    """The name of the worker whose process group `pid` is in."""
    groups = {
        name: stack.processes[name].process.pid for name in WORKERS if name in stack.processes
    }
    (name,) = [name for name, group in groups.items() if os.getpgid(int(pid)) == group]
    return name


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_text_streams_and_the_tool_shows(fleet: tuple[Peer, LocalStack]) -> None:
    streams_the_weather(fleet[0])


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_a_second_task_in_the_context_remembers_the_first(
    fleet: tuple[Peer, LocalStack],
) -> None:
    peer = fleet[0]
    first = peer.send(text("my name is Ada"))
    assert first.state == COMPLETED
    second = peer.send(text("who am I?"), context_id=first.context_id)
    assert second.state == COMPLETED
    assert second.task_id != first.task_id
    assert second.text() == "You said: who am I? Before that: my name is Ada"


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_a_model_error_fails_the_task_with_its_message(
    fleet: tuple[Peer, LocalStack],
) -> None:
    seen = fleet[0].send(text("fail"))
    assert seen.state == "TASK_STATE_FAILED"
    assert test_graph.FAILURE in json.dumps(seen.status_messages()[-1])


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_a_cancel_stops_the_stream(fleet: tuple[Peer, LocalStack]) -> None:
    seen = fleet[0].send(text("slow"), cancel_at=3)
    assert seen.state == "TASK_STATE_CANCELED"
    words = seen.text().split()
    assert 3 <= len(words) < test_graph.SLOW_WORDS
    assert words == [f"w{n}" for n in range(len(words))]  # in order, none missed


@pytest.mark.slow  # a fleet loading the framework in four processes: opt-in
def test_on_the_fleet_an_interrupt_is_answered_by_the_other_worker(
    fleet: tuple[Peer, LocalStack],
) -> None:
    peer, stack = fleet
    asked = peer.send(text("colour?"))
    assert asked.state == INPUT_REQUIRED, asked.events
    question = json.loads(asked.status_messages()[-1][0]["text"])
    assert question["question"] == "Which colour?"
    asker = worker_running(stack, question["askedBy"])
    # The worker that asked stops: only the other can take the answer.
    stack.stop(asker)
    try:
        answered = peer.send(text("blue"), task_id=asked.task_id, context_id=asked.context_id)
        taker = worker_running(stack, answered.output()["answered_by"])
    finally:
        start_worker(stack, asker)
    assert answered.state == COMPLETED, answered.events
    assert answered.text() == "Noted: blue."
    state = answered.output()
    assert state["colour"] == "blue"
    # Asked before the graph stopped: carried across in the checkpoint.
    assert state["asked_by"] == question["askedBy"]
    assert taker != asker


def test_on_the_embedded_server_the_example_streams_asks_and_resumes(tmp_path: Path) -> None:
    run = "examples.frameworks.langgraph_agent:agent"
    with embedded_server(tmp_path, {"TOOLNEXUS_RUN": run}) as (host, port):
        peer = Peer(f"http://{host}:{port}/")
        streams_the_weather(peer)
        asked = peer.send(text("book a table"))
        assert asked.state == INPUT_REQUIRED
        assert asked.status_messages()[-1][0]["text"] == "Shall I book a table? Say yes or no."
        answered = peer.send(text("yes"), task_id=asked.task_id, context_id=asked.context_id)
        assert answered.state == COMPLETED
        assert answered.text() == "Booked: a table."
        assert answered.output() == {"booking": "a table"}
        card = requests.get(f"{peer.url}.well-known/agent-card.json", timeout=10).json()
    assert card["name"] == "weather-and-bookings"  # the graph's name
    assert [(s["id"], s["description"]) for s in card["skills"]] == [
        ("get_weather", "Today's weather in a city.")
    ]
