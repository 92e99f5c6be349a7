"""A LangGraph graph for tests/test_framework_langgraph.py, served by real workers.

The example's scripted model (examples/frameworks/langgraph_agent.py) with
three more behaviours: "fail" raises in the model, "slow" streams four
hundred words a few milliseconds apart (a stream to cancel midway), and
"colour?" asks back, the asking run and the answering one each writing its
process id into the state, which ends as the structured output.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGenerationChunk
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

from examples.frameworks.langgraph_agent import ScriptedModel, get_weather

FAILURE = "the model is out of order"
SLOW_WORDS = 400
# Set by the slow stream when it is stopped before its last word.
STOPPED: list[str] = []


class TestModel(ScriptedModel):
    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        pause = 0.01 if messages[-1].text == "slow" else 0.0
        finished = False
        try:
            for chunk in self._stream(messages, stop, None, **kw):
                await asyncio.sleep(pause)
                if run_manager:
                    await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
                yield chunk
            finished = True
        finally:
            if not finished:
                STOPPED.append(messages[-1].text)

    def answer(self, messages: list[BaseMessage]) -> AIMessage:
        said = messages[-1].text
        if said == "fail":
            raise RuntimeError(FAILURE)
        if said == "slow":
            return AIMessage(" ".join(f"w{n}" for n in range(SLOW_WORDS)))
        return super().answer(messages)


class State(MessagesState):
    city: str | None
    asked_by: int | None
    answered_by: int | None
    colour: str | None


model = TestModel()


async def call_model(state: State) -> dict[str, Any]:
    reply = await model.ainvoke(state["messages"])
    cities = [call["args"]["city"] for call in reply.tool_calls]
    return {"messages": [reply], **({"city": cities[0]} if cities else {})}


def mark(state: State) -> dict[str, Any]:
    return {"asked_by": os.getpid()}


def ask(state: State) -> dict[str, Any]:
    colour = interrupt({"question": "Which colour?", "askedBy": state["asked_by"]})
    return {
        "colour": colour,
        "answered_by": os.getpid(),
        "messages": [AIMessage(f"Noted: {colour}.")],
    }


def first_step(state: State) -> str:
    return "mark" if state["messages"][-1].text == "colour?" else "model"


builder = StateGraph(State)
builder.add_node("model", call_model)
builder.add_node("tools", ToolNode([get_weather]))
builder.add_node("mark", mark)
builder.add_node("ask", ask)
builder.add_conditional_edges(START, first_step, ["model", "mark"])
builder.add_conditional_edges("model", tools_condition)
builder.add_edge("tools", "model")
builder.add_edge("mark", "ask")
builder.add_edge("ask", END)
graph = builder.compile(name="test-graph")
