"""A LangGraph graph, served as it is:
`TOOLNEXUS_RUN=examples.frameworks.langgraph_agent:agent toolnexus-serve`.

`ScriptedModel` (LangChain's offline `GenericFakeChatModel`, taught to call
tools) stands in for a chat model, so the example runs with no network and
no key; put a real one (`init_chat_model(...)`) in its place. Say "weather in
Paris" for a tool call, "book a table" for a question back (`interrupt()`:
the graph waits for a yes or a no), anything else to have it echoed with what
you said before.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import interrupt

WEATHER = "weather in "
BOOK = "book "


class ScriptedModel(GenericFakeChatModel):
    """An offline chat model: a tool call when the message asks for one,
    else text, streamed word by word."""

    messages: Iterator[AIMessage | str] = iter(())

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self  # the script knows its one tool

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.answer(messages))])

    def _stream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> Iterator[ChatGenerationChunk]:
        answer = self.answer(messages)
        if not answer.tool_calls:
            yield from super()._stream(messages, stop, run_manager, **kw)
            return
        # GenericFakeChatModel streams text only: a tool call is one chunk.
        calls = [
            {"name": c["name"], "args": json.dumps(c["args"]), "id": c["id"], "index": i}
            for i, c in enumerate(answer.tool_calls)
        ]
        chunk = ChatGenerationChunk(message=AIMessageChunk(content="", tool_call_chunks=calls))
        if run_manager:
            run_manager.on_llm_new_token("", chunk=chunk)
        yield chunk

    def answer(self, messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(f"The weather: {last.text}.")
        said = [m.text for m in messages if m.type == "human"]
        if said[-1].lower().startswith(WEATHER):
            city = said[-1][len(WEATHER) :].strip()
            call = {"name": "get_weather", "args": {"city": city}, "id": f"call-{len(messages)}"}
            return AIMessage(content="", tool_calls=[call])
        before = f" Before that: {' | '.join(said[:-1])}" if said[:-1] else ""
        return AIMessage(f"You said: {said[-1]}{before}")


@tool
def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return f"sunny and 21 °C in {city}"


class State(MessagesState):
    city: str | None
    booking: str | None


model = ScriptedModel().bind_tools([get_weather])


async def call_model(state: State) -> dict[str, Any]:
    reply = await model.ainvoke(state["messages"])
    cities = [call["args"]["city"] for call in reply.tool_calls]
    return {"messages": [reply], **({"city": cities[0]} if cities else {})}


def confirm(state: State) -> dict[str, Any]:
    request = state["messages"][-1].text[len(BOOK) :].strip()
    # The run stops here until the user answers; the answer is `interrupt`'s value.
    answer = interrupt(f"Shall I book {request}? Say yes or no.")
    booked = str(answer).strip().lower().startswith("y")
    words = f"Booked: {request}." if booked else "Nothing booked."
    return {"booking": request if booked else None, "messages": [AIMessage(words)]}


def first_step(state: State) -> str:
    return "confirm" if state["messages"][-1].text.lower().startswith(BOOK) else "model"


builder = StateGraph(State)
builder.add_node("model", call_model)
builder.add_node("tools", ToolNode([get_weather]))
builder.add_node("confirm", confirm)
builder.add_conditional_edges(START, first_step, ["model", "confirm"])
builder.add_conditional_edges("model", tools_condition)
builder.add_edge("tools", "model")
builder.add_edge("confirm", END)
agent = builder.compile(name="weather-and-bookings")
