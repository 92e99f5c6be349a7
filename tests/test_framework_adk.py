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
import sys
import time
import types
from typing import Any

import pytest

from tests.support.redis_server import ci
from toolnexus import Ask, Checkpoint, Chunk, Done, Progress
from toolnexus.frameworks import adapter_of, adk, facts_of
from toolnexus.frameworks.facts import Skill

if importlib.util.find_spec("google.adk") is None:
    # Loudly: skipped here, failed under CI=true.
    assert not ci(), "NO GOOGLE ADK: pip install 'toolnexus-serve[adk]'"
    pytest.skip("NO GOOGLE ADK: pip install 'toolnexus-serve[adk]'", allow_module_level=True)

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
