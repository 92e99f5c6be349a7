"""A Google ADK agent, served as it is:
`TOOLNEXUS_RUN=examples.frameworks.adk_agent:agent toolnexus-serve`.

`ScriptedModel` stands in for Gemini, so the example runs offline with no
key: it reads the latest message and answers the way a model would, word by
word when streaming. Say "weather in Paris" for a tool call, "book a table"
for a question back (a long-running tool waiting for the user's answer), and
anything else to have it echoed with what you said before.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.genai import types


class ScriptedModel(BaseLlm):
    """An offline model: a tool call when the message asks for one, else
    text, streamed a word at a time."""

    model: str = "scripted"
    # Seconds between streamed words.
    pause: float = 0.0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        call = self.tool_call(llm_request)
        if call is not None:
            yield LlmResponse(
                content=types.Content(role="model", parts=[types.Part(function_call=call)])
            )
            return
        words = self.reply(llm_request).split(" ")
        if stream:
            for index, word in enumerate(words):
                await asyncio.sleep(self.pause)
                piece = word if index == 0 else f" {word}"
                yield LlmResponse(
                    content=types.Content(role="model", parts=[types.Part(text=piece)]),
                    partial=True,
                )
        yield LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=" ".join(words))])
        )

    def tool_call(self, llm_request: LlmRequest) -> types.FunctionCall | None:
        text = latest_text(llm_request)
        if text is None:
            return None  # a tool's result came back: answer in words
        lowered = text.lower()
        if lowered.startswith("weather in "):
            return types.FunctionCall(name="get_weather", args={"city": text[len("weather in ") :]})
        if lowered.startswith("book "):
            return types.FunctionCall(name="ask_for_approval", args={"request": text})
        return None

    def reply(self, llm_request: LlmRequest) -> str:
        last = llm_request.contents[-1]
        for part in last.parts or ():
            if part.function_response is not None:
                result = json.dumps(part.function_response.response, sort_keys=True)
                return f"The {part.function_response.name} tool says {result}"
        said = [t for t in user_texts(llm_request)]
        reply = f"You said: {said[-1]}" if said else "Hello!"
        if len(said) > 1:
            reply += f" (before that: {'; '.join(said[:-1])})"
        return reply


def latest_text(llm_request: LlmRequest) -> str | None:
    """The text of the latest user turn; None when that turn is a tool's result."""
    last = llm_request.contents[-1] if llm_request.contents else None
    if last is None or any(p.function_response is not None for p in last.parts or ()):
        return None
    return " ".join(p.text for p in last.parts or () if p.text)


def user_texts(llm_request: LlmRequest) -> list[str]:
    found = []
    for content in llm_request.contents:
        text = " ".join(p.text for p in content.parts or () if p.text)
        if content.role == "user" and text:
            found.append(text)
    return found


def get_weather(city: str) -> dict[str, Any]:
    """Tells the weather in a city."""
    return {"city": city, "sky": "sunny", "celsius": 21}


def ask_for_approval(request: str) -> dict[str, Any]:
    """Asks the user to approve a request before it is carried out."""
    return {"status": "pending", "question": f"Shall I go ahead with '{request}'? (yes/no)"}


agent = LlmAgent(
    name="concierge",
    description="Tells the weather and books things once you approve.",
    instruction="Help the user; ask for approval before booking anything.",
    model=ScriptedModel(),
    tools=[get_weather, LongRunningFunctionTool(ask_for_approval)],
)
