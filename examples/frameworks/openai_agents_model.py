"""A stand-in model for the OpenAI Agents SDK that answers by rules, offline.

It implements the SDK's `Model` interface and streams what the Responses API
would: text deltas as they are produced, each output item when it is done,
and `response.completed` carrying the whole output. No network and no key;
it reads the latest user message (and the earlier ones, for a name) and
answers the same way every time:

- `weather in <city>`: calls the `get_weather` tool, then says what it returned;
- `book <restaurant>`: says it asks first, then calls `book_table`, a tool that
  needs the user's approval;
- `forecast <city>`: hands off to the agent with a structured output, which
  answers with a forecast as JSON;
- `my name is <name>` / `what is my name?`: remembers the name across turns;
- `count to <n>`: counts slowly, one number a tenth of a second;
- `fail ...`: raises, as a model whose API is down would;
- anything else: says it back.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

from agents import Handoff, ModelResponse, ModelSettings, Tool, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.models.interface import Model, ModelTracing
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
)

# How long `count to <n>` waits before each number: long enough to cancel mid-way.
COUNT_PAUSE = 0.1


class ModelDown(Exception):
    """What the model raises when told to `fail`."""


@dataclass
class Plan:
    """One answer: text pieces streamed one by one, then tool calls."""

    pieces: list[str] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    pause: float = 0.0


class OfflineModel(Model):
    """Answers by the rules in this module's docstring."""

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any | None,
    ) -> ModelResponse:
        plan = answer(_items(input), output_schema, handoffs)
        output = _message(plan.pieces) + _calls(plan.calls)
        return ModelResponse(output=output, usage=Usage(requests=1), response_id=None)

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        plan = answer(_items(input), output_schema, handoffs)
        message = _message(plan.pieces)
        message_id = message[0].id if message else ""
        output: list[TResponseOutputItem] = [*message, *_calls(plan.calls)]
        number = 0
        for piece in plan.pieces:
            await asyncio.sleep(plan.pause)
            yield ResponseTextDeltaEvent(
                type="response.output_text.delta",
                item_id=str(message_id),
                output_index=0,
                content_index=0,
                delta=piece,
                logprobs=[],
                sequence_number=number,
            )
            number += 1
        for index, item in enumerate(output):
            yield ResponseOutputItemDoneEvent(
                type="response.output_item.done",
                item=item,
                output_index=index,
                sequence_number=number,
            )
            number += 1
        yield ResponseCompletedEvent(
            type="response.completed",
            response=Response(
                id=f"resp_{uuid.uuid4().hex}",
                created_at=time.time(),
                model="offline",
                object="response",
                output=output,
                tool_choice="auto",
                tools=[],
                parallel_tool_calls=False,
                status="completed",
            ),
            sequence_number=number,
        )


def answer(
    items: list[dict[str, Any]],
    output_schema: AgentOutputSchemaBase | None,
    handoffs: list[Handoff],
) -> Plan:
    """What the model says to this input."""
    said = [text for role, text in _said(items) if role == "user"]
    latest = said[-1] if said else ""
    if output_schema is not None:  # the forecaster: JSON in the schema's shape
        city = _after(latest, "forecast") or "somewhere"
        return Plan([json.dumps({"city": city, "sky": "sunny", "high_c": 21})])
    last = items[-1] if items else {}
    if last.get("type") == "function_call_output":
        return Plan(_words(str(last.get("output"))))
    lowered = latest.lower()
    if lowered.startswith("fail"):
        raise ModelDown("the model is down (asked to fail)")
    if city := _after(latest, "weather in"):
        return Plan(calls=[("get_weather", {"city": city})])
    if restaurant := _after(latest, "book"):
        return Plan(
            _words(f"I will ask you before booking (asked by process {os.getpid()})."),
            calls=[("book_table", {"restaurant": restaurant, "people": 2})],
        )
    if _after(latest, "forecast") and handoffs:
        return Plan(calls=[(handoffs[0].tool_name, {})])
    if name := _after(latest, "my name is"):
        return Plan(_words(f"Nice to meet you, {name}."))
    if "what is my name" in lowered:
        names = [n for text in said[:-1] if (n := _after(text, "my name is"))]
        return Plan(_words(f"Your name is {names[-1]}." if names else "You have not told me."))
    if count := re.search(r"count to (\d+)", lowered):
        numbers = [f"{n} " for n in range(1, int(count.group(1)) + 1)]
        return Plan(numbers, pause=COUNT_PAUSE)
    return Plan(_words(f"You said: {latest}"))


def _items(input: str | list[TResponseInputItem]) -> list[dict[str, Any]]:
    if isinstance(input, str):
        return [{"role": "user", "content": input}]
    return [dict(item) for item in input]


def _said(items: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """(role, text) of each message among the input items."""
    found = []
    for item in items:
        role, content = item.get("role"), item.get("content")
        if role is None or item.get("type") not in (None, "message"):
            continue
        if isinstance(content, str):
            found.append((str(role), content))
        elif isinstance(content, list):
            text = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
            found.append((str(role), text))
    return found


def _after(text: str, words: str) -> str:
    """What follows `words` in `text` (case-insensitively), up to a full stop."""
    found = re.search(rf"\b{re.escape(words)}\s+([^.?!]+)", text, re.IGNORECASE)
    return found.group(1).strip() if found else ""


def _words(text: str) -> list[str]:
    """`text` in word-sized pieces, as a model streams it."""
    return re.findall(r"\S+\s*", text)


def _message(pieces: list[str]) -> list[ResponseOutputMessage]:
    if not pieces:
        return []
    text = ResponseOutputText(type="output_text", text="".join(pieces), annotations=[])
    return [
        ResponseOutputMessage(
            id=f"msg_{uuid.uuid4().hex}",
            type="message",
            role="assistant",
            status="completed",
            content=[text],
        )
    ]


def _calls(calls: list[tuple[str, dict[str, Any]]]) -> list[TResponseOutputItem]:
    made: list[TResponseOutputItem] = []
    for name, arguments in calls:
        call_id = f"call_{uuid.uuid4().hex[:16]}"
        made.append(
            ResponseFunctionToolCall(
                id=call_id,
                call_id=call_id,
                type="function_call",
                name=name,
                arguments=json.dumps(arguments),
            )
        )
    return made
