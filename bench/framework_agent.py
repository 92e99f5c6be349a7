"""The Pydantic AI agent the framework benchmarks serve, offline.

`agent` answers every message with the same short reply, streamed in a few
deltas by a `FunctionModel` (no network, no API key), so what is measured
is the serving around it. Served three ways by bench/frameworks_fasta2a.py:

    TOOLNEXUS_RUN=bench.framework_agent:agent          this service, the agent itself
    TOOLNEXUS_RUN=bench.framework_agent:by_hand        the same run written as a plain function
    uvicorn --factory bench.framework_agent:fasta2a_app    FastA2A's `agent_to_a2a`

`by_hand` yields what the Pydantic AI adapter yields for a text answer (the
deltas as chunks of the `result` artifact, an empty last chunk, `Done`): it
serves the agent where the adapter is not there to recognize it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from toolnexus import Chunk, Done

# The reply, as the model streams it.
DELTAS = ("The", " answer", " is", " forty-two.")


def streaming_agent(deltas: tuple[str, ...]) -> Agent[None, str]:
    """An agent whose model writes `deltas`, one stream event each (or all
    at once when a run does not stream)."""

    def whole(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("".join(deltas))])

    async def streamed(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for delta in deltas:
            yield delta

    return Agent(FunctionModel(whole, stream_function=streamed), name="bench-agent")


agent = streaming_agent(DELTAS)


async def by_hand(text: str) -> AsyncIterator[object]:
    """The agent's run written as a plain agent function, read from the same
    event stream the adapter reads."""
    async with agent.run_stream_events(text) as events:
        async for delta in text_deltas(events):
            yield Chunk(delta, artifact="result")
    yield Chunk("", artifact="result", last=True)
    yield Done()


async def text_deltas(events: AsyncIterator[object]) -> AsyncIterator[str]:
    """The text a run's events add to its answer, piece by piece."""
    async for event in events:
        if isinstance(event, PartDeltaEvent):
            if isinstance(event.delta, TextPartDelta) and event.delta.content_delta:
                yield event.delta.content_delta
        elif (
            isinstance(event, PartStartEvent)
            and isinstance(event.part, TextPart)
            and event.part.content
        ):
            yield event.part.content


def fasta2a_app() -> Any:
    """FastA2A's server for `agent`: its in-memory storage and broker, the
    agent run in the serving process."""
    from fasta2a.pydantic_ai import agent_to_a2a  # type: ignore[import-untyped]

    return agent_to_a2a(agent, name="bench-agent", description="The benchmark's fixed reply.")
