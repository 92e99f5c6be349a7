"""Pydantic AI agents on an offline `FunctionModel`, for the adapter's tests.

`agent` reads the first word of the latest prompt:

- `count N DELAY [FILE]`: streams `1 2 ... N`, DELAY seconds apart; with
  FILE, writes the last number streamed there, and `stopped` when the
  stream is closed before its end.
- `add A B`: calls the `add` tool, then answers with its result.
- `delete NAME`: calls `delete`, which needs approval; the call's
  arguments carry the process that asked, the tool's result the one that
  ran it.
- `recall`: answers with every earlier user prompt the model was given.
- `forecast CITY`: typed output (`Forecast`), its arguments streamed in
  two pieces.
- `fail`: the model raises.
- anything else: `echo: ` and the prompt.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic import BaseModel
from pydantic_ai import Agent, ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel


def prompts(messages: list[ModelMessage]) -> list[str]:
    """Every user prompt of the history, oldest first."""
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


async def model(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    returned = [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]
    if returned:
        yield f"{returned[0].tool_name} gave "
        yield str(returned[0].content)
        return
    said = prompts(messages)
    words = said[-1].split() if said else []
    command = words[0] if words else ""
    if command == "count":
        async for number in count(int(words[1]), float(words[2]), words[3:]):
            yield number
    elif command == "add":
        arguments = {"a": int(words[1]), "b": int(words[2])}
        yield {0: DeltaToolCall("add", json.dumps(arguments), tool_call_id="add-1")}
    elif command == "delete":
        arguments = {"name": words[1], "asked_in": os.getpid()}
        yield {0: DeltaToolCall("delete", json.dumps(arguments), tool_call_id="delete-1")}
    elif command == "recall":
        yield "you said: "
        yield " | ".join(said[:-1])
    elif command == "forecast":
        arguments = json.dumps({"city": words[1], "degrees": 21})
        name = info.output_tools[0].name
        yield {0: DeltaToolCall(name, arguments[:10], tool_call_id="out-1")}
        yield {0: DeltaToolCall(None, arguments[10:])}
    elif command == "fail":
        raise RuntimeError("the model is out of order")
    else:
        yield "echo: "
        yield " ".join(words)


async def count(up_to: int, delay: float, file: list[str]) -> AsyncIterator[str]:
    marks = Path(file[0]) if file else None
    finished = False
    try:
        for number in range(1, up_to + 1):
            if marks is not None:
                marks.write_text(str(number))
            yield f"{number} "
            await asyncio.sleep(delay)
        finished = True
    finally:
        if marks is not None and not finished:
            marks.write_text("stopped")


class Forecast(BaseModel):
    city: str
    degrees: int


agent = Agent(
    FunctionModel(stream_function=model),
    output_type=[str, Forecast],
    name="pydantic-ai-test-agent",
    instructions="You count, add, delete, recall and forecast.",
)


@agent.tool_plain
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@agent.tool_plain(requires_approval=True)
def delete(name: str, asked_in: int) -> str:
    """Delete a thing, once the user approves."""
    return f"deleted {name}, asked in {asked_in}, run in {os.getpid()}"
