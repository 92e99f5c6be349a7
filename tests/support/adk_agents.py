"""The example's ADK agent with what a test needs besides: which process ran
a step, a slow count to cancel, a failing model.
`TOOLNEXUS_RUN=tests.support.adk_agents:agent` (with the checkout on PYTHONPATH).

- "book <what>": the long-running approval tool; its question names the
  process that asked, and the answer's reply the process that took it;
- "count to <n>": n numbers streamed a tenth of a second apart;
- "fail <why>": the model raises `ConnectionError(why)`;
- anything else: as the example's model answers it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.long_running_tool import LongRunningFunctionTool
from google.genai import types

from examples.frameworks.adk_agent import ScriptedModel, get_weather, latest_text


class TestingModel(ScriptedModel):
    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        text = latest_text(llm_request) or ""
        if text.startswith("fail "):
            raise ConnectionError(text[len("fail ") :])
        if text.startswith("count to "):
            numbers = [str(n) for n in range(1, int(text.split()[-1]) + 1)]
            for number in numbers:
                await asyncio.sleep(0.1)
                yield LlmResponse(
                    content=types.Content(role="model", parts=[types.Part(text=f"{number} ")]),
                    partial=True,
                )
            whole = " ".join(numbers) + " "
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=whole)]))
            return
        async for response in super().generate_content_async(llm_request, stream):
            yield response

    def reply(self, llm_request: LlmRequest) -> str:
        said = super().reply(llm_request)
        if "ask_for_approval" in said:
            said += f" (answered by process {os.getpid()})"
        return said


def ask_for_approval(request: str) -> dict[str, Any]:
    """Asks the user to approve a request before it is carried out."""
    return {
        "status": "pending",
        "question": f"Shall I go ahead with '{request}'? (asked by process {os.getpid()})",
    }


agent = LlmAgent(
    name="tested",
    description="The example's agent, with a process id in its answers.",
    model=TestingModel(),
    tools=[get_weather, LongRunningFunctionTool(ask_for_approval)],
)
