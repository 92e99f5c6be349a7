"""A Pydantic AI agent served as it is, on an offline model (no key, no network).

    TOOLNEXUS_RUN=examples.frameworks.pydantic_ai_agent:agent toolnexus-serve

`FunctionModel` stands in for a real model: it streams its answer word by
word, calls `count_words` when asked to count, and calls `delete_note`
(which needs the user's approval) when asked to delete. Swap in a real
model (`Agent("openai:gpt-5.2", ...)`) and nothing else changes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from pydantic_ai import Agent, ModelMessage, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel


async def offline_model(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    """Answers the way a model would: a tool call, or text in pieces."""
    parts = messages[-1].parts
    returned = [part for part in parts if isinstance(part, ToolReturnPart)]
    if returned:
        answer = f"{returned[0].tool_name} says: {returned[0].content}"
    else:
        asked = [part.content for part in parts if isinstance(part, UserPromptPart)]
        text = str(asked[-1]) if asked else ""
        command, _, rest = text.partition(" ")
        if command == "count":
            yield {0: DeltaToolCall("count_words", json.dumps({"text": rest}), tool_call_id="c1")}
            return
        if command == "delete":
            yield {0: DeltaToolCall("delete_note", json.dumps({"title": rest}), tool_call_id="d1")}
            return
        answer = f"You said: {text}. Try 'count some words' or 'delete groceries'."
    for word in answer.split(" "):
        yield word + " "


agent = Agent(
    FunctionModel(stream_function=offline_model),
    name="notes",
    instructions="You count words and keep notes.",
)


@agent.tool_plain
def count_words(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


@agent.tool_plain(requires_approval=True)
def delete_note(title: str) -> str:
    """Delete a note (asks the user first)."""
    return f"note {title!r} deleted"
