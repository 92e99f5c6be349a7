"""An OpenAI Agents SDK `Agent`, served as it is.

The run streams through `Runner.run_streamed`: the model's text deltas become
chunks, each tool call and tool output a progress message, and a final output
that is not text (an agent with an `output_type`) a data artifact. A tool that
needs approval (`function_tool(needs_approval=True)`) interrupts the run: the
task asks the peer, keeping the SDK's serialized `RunState` as its
checkpoint; the answer (`yes`/`no`, or data `{"approve": true|false}`)
approves or rejects every pending call and the run goes on from that state,
on whichever worker takes it. Earlier messages of the context come in as the
run's input items, so a conversation goes on where it left off.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncGenerator, Callable, Mapping
from contextlib import aclosing
from types import ModuleType
from typing import Any

from toolnexus import Chunk, Data, parts_of
from toolnexus.frameworks import outputs
from toolnexus.frameworks.facts import Facts, Skill
from toolnexus.frameworks.inputs import as_text

# The key the SDK's serialized run state is kept under in the checkpoint.
STATE = "openaiAgentsRunState"
YES = frozenset({"yes", "y", "approve", "approved", "ok", "true"})
NO = frozenset({"no", "n", "reject", "rejected", "deny", "false"})


def _sdk() -> ModuleType | None:
    """The SDK's top-level module when it is imported; None otherwise, or
    when the module named `agents` is some other project's."""
    module = sys.modules.get("agents")
    agent_class = getattr(module, "Agent", None)
    if not isinstance(agent_class, type) or agent_class.__module__ != "agents.agent":
        return None
    if not all(hasattr(module, name) for name in ("Runner", "RunState", "FunctionTool")):
        return None
    return module


def recognizes(obj: object) -> bool:
    sdk = _sdk()
    return sdk is not None and isinstance(obj, sdk.Agent)


def facts(obj: Any) -> Facts:
    sdk = _sdk()
    instructions = obj.instructions if isinstance(obj.instructions, str) else None
    skills = tuple(
        Skill(id=tool.name, name=tool.name, description=tool.description or "")
        for tool in obj.tools
        if sdk is not None and isinstance(tool, sdk.FunctionTool)
    )
    return Facts(name=obj.name, description=instructions or obj.handoff_description, skills=skills)


def run_function(obj: Any) -> Callable[..., AsyncGenerator[object, None]]:
    agent = obj

    async def run(
        message: Mapping[str, Any],
        conversation: list[Mapping[str, Any]] | None = None,
        checkpoint: Any = None,
    ) -> AsyncGenerator[object, None]:
        from agents import Runner, RunState

        saved = checkpoint.get(STATE) if isinstance(checkpoint, Mapping) else None
        # Tool names by call id: an approved call's output comes in a later
        # run than the call, and only the call names its tool.
        names: dict[str, str] = {}
        if saved is None:
            start: Any = [*map(_input_item, conversation or []), _input_item(message)]
        else:
            start = await RunState.from_json(agent, saved)
            approve = _decision(message)
            if approve is None:  # not an answer: the same question again
                for item in outputs.ask(_question(start.get_interruptions()), checkpoint):
                    yield item
                return
            for pending in start.get_interruptions():
                names[pending.call_id or ""] = pending.name or "tool"
                if approve:
                    start.approve(pending)
                else:
                    start.reject(pending)
        result = Runner.run_streamed(agent, start)
        streamed = False
        # Closing this generator (a cancel) closes the relay, which stops the run.
        async with aclosing(_relay(result, names)) as shown:
            async for shown_item in shown:
                streamed = streamed or isinstance(shown_item, Chunk)
                yield shown_item
        if streamed:
            yield outputs.text_end()
        if result.interruptions:
            state = result.to_state().to_json()
            for item in outputs.ask(_question(result.interruptions), {STATE: state}):
                yield item
            return
        final = result.final_output
        if final is not None and not isinstance(final, str):
            yield outputs.structured(final)
            final = None
        yield outputs.done(streamed, final)

    return run


async def _relay(result: Any, names: dict[str, str]) -> AsyncGenerator[object, None]:
    """What the run's events show, as they come: text chunks, tool calls,
    tool outputs. Closing this stops the run."""
    events = result.stream_events()
    try:
        async for event in events:
            if event.type == "raw_response_event":
                data = event.data
                if (
                    data.type == "response.output_text.delta"
                    and data.delta
                    and _speaks_text(result.current_agent)
                ):
                    yield outputs.text_chunk(data.delta)
            elif event.type == "run_item_stream_event":
                item = event.item
                if event.name == "tool_called":
                    name = str(getattr(item.raw_item, "name", None) or item.tool_name or "tool")
                    names[item.call_id or ""] = name
                    arguments = _arguments(getattr(item.raw_item, "arguments", None))
                    yield outputs.tool_called(name, arguments, item.call_id)
                elif event.name == "tool_output":
                    name = names.get(item.call_id or "", "tool")
                    yield outputs.tool_returned(name, item.output, item.call_id)
    finally:
        if not result.is_complete:
            # Stopped from outside (a cancel): the SDK's background run stops too.
            result.cancel()
        await events.aclose()


def _speaks_text(agent: Any) -> bool:
    """True when the agent's final output is text: an agent with an
    `output_type` streams JSON, which lands as data instead."""
    return agent.output_type is None or agent.output_type is str


def _arguments(raw: object) -> object:
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def _question(pending: list[Any]) -> str:
    calls = "; ".join(f"{item.name}({item.arguments or ''})" for item in pending)
    return f"May I call {calls or 'the tool'}? Answer yes or no."


def _decision(message: Mapping[str, Any]) -> bool | None:
    """The peer's answer to an approval: True, False, or None when it is neither."""
    for part in parts_of(message):
        if isinstance(part, Data) and isinstance(part.value, Mapping):
            approve = part.value.get("approve")
            if isinstance(approve, bool):
                return approve
        elif isinstance(part, str):
            # The first word decides: "yes", "Yes, please.", "no thanks".
            words = re.findall(r"[a-z]+", part.lower())
            if words and words[0] in YES:
                return True
            if words and words[0] in NO:
                return False
    return None


def _input_item(message: Mapping[str, Any]) -> dict[str, Any]:
    """One stored message as a Responses API input message."""
    role = "assistant" if message.get("role") == "agent" else "user"
    return {"role": role, "content": as_text(parts_of(message))}
