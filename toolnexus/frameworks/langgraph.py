"""LangGraph: a compiled graph served as it is.

Any `Pregel` qualifies: what `StateGraph(...).compile()`, `create_react_agent`
and the functional API's `@entrypoint` give. The graph runs with
`astream(stream_mode=["messages", "updates"])`: the chat models' tokens
become text chunks, the AI messages' tool calls and the `ToolMessage`s the
tools answer with become tool progress, and the final state, when it holds
more than messages, the structured output.

`interrupt(value)` in a node becomes a question back to the peer. The graph
runs on a checkpointer of the adapter's own (`langgraph_saver.JsonSaver`,
whatever checkpointer the graph was compiled with, on a copy of it), whose
contents go with the question as the task's checkpoint, so the answer
resumes the graph (`Command(resume=answer)`) on whichever worker takes it.
The thread is the task: its id is the thread id.

LangGraph is imported inside the functions only, when a graph is run; the
package itself is looked up in `sys.modules` to recognize a graph.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import aclosing
from typing import Any

from toolnexus import Data, PartLike, parts_of
from toolnexus.frameworks import outputs
from toolnexus.frameworks.facts import Facts, Skill
from toolnexus.frameworks.inputs import as_text

# The name LangGraph gives every graph not named otherwise: it tells a peer nothing.
DEFAULT_NAME = "LangGraph"
# The state key chat graphs keep their messages under (`MessagesState`).
MESSAGES = "messages"
# What the task's checkpoint holds while a question waits for its answer.
SAVER = "langgraph"
INTERRUPT = "interrupt"
# Between the texts of two AI messages of one run, in the one text artifact.
BETWEEN_MESSAGES = "\n\n"


def recognizes(obj: object) -> bool:
    """True for a compiled graph (a `langgraph.pregel.Pregel`)."""
    module = sys.modules.get("langgraph.pregel")
    pregel = getattr(module, "Pregel", None)
    return isinstance(pregel, type) and isinstance(obj, pregel)


def facts(graph: Any) -> Facts:
    """The graph's name (unless LangGraph's default) and the tools of its
    `ToolNode`s as skills."""
    name = getattr(graph, "name", None)
    return Facts(
        name=name if isinstance(name, str) and name != DEFAULT_NAME else None,
        skills=tuple(_skills(graph)),
    )


def _skills(graph: Any) -> Iterator[Skill]:
    module = sys.modules.get("langgraph.prebuilt.tool_node")
    tool_node: Any = getattr(module, "ToolNode", None)
    if not isinstance(tool_node, type):
        return  # nothing imported LangGraph's ToolNode: no graph holds one
    graphs = [graph, *(sub for _, sub in graph.get_subgraphs(recurse=True))]
    seen: set[str] = set()
    for each in graphs:
        for node in each.nodes.values():
            if not isinstance(node.bound, tool_node):
                continue
            tools: dict[str, Any] = getattr(node.bound, "tools_by_name", {})
            for tool in tools.values():
                if tool.name not in seen:
                    seen.add(tool.name)
                    yield Skill(id=tool.name, name=tool.name, description=tool.description or "")


def run_function(graph: Any) -> Callable[..., AsyncIterator[object]]:
    """The agent function that runs `graph` for one task's turn."""

    async def run_graph(
        message: dict[str, Any],
        task: dict[str, Any],
        checkpoint: Any = None,
        conversation: list[dict[str, Any]] | None = None,
    ) -> AsyncIterator[object]:
        from toolnexus.frameworks.langgraph_saver import JsonSaver

        waiting = _waiting(checkpoint)
        if waiting is not None:
            saver = JsonSaver.load(waiting[SAVER])
            graph_input = _resume(waiting.get(INTERRUPT), parts_of(message))
        else:
            saver = JsonSaver()
            graph_input = _input(graph, parts_of(message), conversation or [])
        runnable = graph.copy({"checkpointer": saver})
        config = {"configurable": {"thread_id": str(task["id"])}}
        reader = _Reader()
        stream = runnable.astream(graph_input, config, stream_mode=["messages", "updates"])
        # Closed however this generator ends (a cancel closes it at a
        # yield): the graph's running steps are cancelled with it.
        async with aclosing(stream):
            async for mode, payload in stream:
                for item in reader.read(mode, payload):
                    yield item
        if reader.streamed:
            yield outputs.text_end()
        if reader.paused is not None:
            question, interrupt_id = _question(reader.paused)
            state: dict[str, Any] = {
                SAVER: saver.dump(latest_only=not _has_delta_channels(graph)),
                INTERRUPT: interrupt_id,
            }
            saved, ask = outputs.ask(question, state)
            yield saved
            yield ask
            return
        values = (await runnable.aget_state(config)).values
        text = values if isinstance(values, str) else None
        found = _structured(values)
        if found is not None:
            yield outputs.structured(found)
        yield outputs.done(reader.streamed, text)

    return run_graph


class _Reader:
    """Turns the stream's `(mode, payload)` pairs into toolnexus values."""

    def __init__(self) -> None:
        self.streamed = False
        # The interrupts the graph stopped on (empty: a static breakpoint).
        self.paused: tuple[Any, ...] | None = None
        self._last_message: str | None = None
        self._seen_calls: set[tuple[str, str]] = set()

    def read(self, mode: str, payload: Any) -> Iterator[object]:
        if mode == "messages":
            yield from self._text(payload[0])
        elif mode == "updates" and isinstance(payload, Mapping):
            for node, update in payload.items():
                if node == "__interrupt__":
                    self.paused = (*(self.paused or ()), *update)
                else:
                    yield from self._tools(update)

    def _text(self, message: Any) -> Iterator[object]:
        # Only AI messages are the model's words: tool results and the
        # input's messages are not.
        if getattr(message, "type", None) not in ("ai", "AIMessageChunk"):
            return
        text = str(message.text)
        if not text:
            return
        if self.streamed and message.id != self._last_message:
            yield outputs.text_chunk(BETWEEN_MESSAGES)
        self._last_message = message.id
        self.streamed = True
        yield outputs.text_chunk(text)

    def _tools(self, update: Any) -> Iterator[object]:
        for message in _messages_in(update):
            kind = getattr(message, "type", None)
            if kind == "ai":
                for call in getattr(message, "tool_calls", None) or []:
                    if self._first(("call", str(call.get("id")))):
                        yield outputs.tool_called(call["name"], call.get("args"), call.get("id"))
            elif kind == "tool" and self._first(("result", str(message.tool_call_id))):
                result = message.content
                yield outputs.tool_returned(str(message.name), result, message.tool_call_id)

    def _first(self, key: tuple[str, str]) -> bool:
        """True the first time a call or its result is seen (a node may
        return messages an earlier step already reported)."""
        if key in self._seen_calls:
            return False
        self._seen_calls.add(key)
        return True


def _messages_in(update: Any) -> Iterator[Any]:
    """The messages a node's update carries, at its top level or one list down."""
    values: Sequence[Any]
    if isinstance(update, Mapping):
        values = list(update.values())
    elif isinstance(update, list | tuple):
        values = update
    else:
        values = [getattr(update, "update", None)]  # a Command
        if isinstance(values[0], Mapping):
            values = list(values[0].values())
    for value in values:
        for item in value if isinstance(value, list | tuple) else [value]:
            if hasattr(item, "type") and hasattr(item, "content"):
                yield item


def _waiting(checkpoint: Any) -> dict[str, Any] | None:
    """The state a question of this adapter's left in the task's checkpoint."""
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get(SAVER), dict):
        return checkpoint
    return None


def _question(interrupts: tuple[Any, ...]) -> tuple[str, str | None]:
    """The text to ask and the interrupt it answers: the first one's (the
    others, still pending, ask again when the graph resumes)."""
    if not interrupts:
        return "The graph paused before its next step: reply to go on.", None
    first = interrupts[0]
    value = first.value
    text = value if isinstance(value, str) else json.dumps(outputs.jsonable(value))
    return text, str(first.id)


def _resume(interrupt_id: Any, parts: list[PartLike]) -> Any:
    """The input that resumes a paused graph with the peer's answer: a lone
    data part as its value, anything else as text."""
    from langgraph.types import Command

    if interrupt_id is None:
        return None  # a static breakpoint: going on takes no value
    answer: Any = (
        parts[0].value if len(parts) == 1 and isinstance(parts[0], Data) else as_text(parts)
    )
    return Command(resume={str(interrupt_id): answer})


def _input(graph: Any, parts: list[PartLike], conversation: list[dict[str, Any]]) -> Any:
    """The graph's input for a new turn.

    A graph with a `messages` state gets the conversation so far and the
    new message as chat messages (a data part holding an object fills the
    state's other fields); any other graph gets a data part's object as its
    input, or the text when its input is a single value or field.
    """
    fields = _input_fields(graph)
    given = {k: v for part in parts if isinstance(part, Data) for k, v in _object(part).items()}
    rest = [part for part in parts if not (isinstance(part, Data) and _object(part))]
    if fields is not None and MESSAGES in fields:
        from langchain_core.messages import AIMessage, HumanMessage

        history: list[Any] = []
        for number, earlier in enumerate(conversation):
            text = as_text(parts_of(earlier))
            kind = AIMessage if earlier.get("role") == "agent" else HumanMessage
            history.append(kind(content=text, id=f"conversation-{number}"))
        history.append(HumanMessage(content=as_text(rest), id="message"))
        return {**{k: v for k, v in given.items() if k != MESSAGES}, MESSAGES: history}
    if given:
        return given
    if fields is None:
        return as_text(parts)
    if len(fields) == 1:
        return {fields[0]: as_text(parts)}
    raise ValueError(
        f"this graph's input has the fields {', '.join(fields)} and no `messages`:"
        " send them as a data part holding an object"
    )


def _input_fields(graph: Any) -> list[str] | None:
    """The fields of the graph's input; None when its input is one value."""
    try:
        schema = graph.get_input_jsonschema()
    except Exception:  # a type pydantic cannot describe: treat it as one value
        return None
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return list(properties) if isinstance(properties, dict) else None


def _object(part: Data) -> dict[str, Any]:
    return part.value if isinstance(part.value, dict) else {}


def _structured(values: Any) -> Any:
    """The final state as structured output: its fields besides `messages`
    (None when it has no others), or a value that is neither text nor a state."""
    if isinstance(values, Mapping):
        rest = {k: v for k, v in values.items() if k != MESSAGES}
        return rest or None
    if values is None or isinstance(values, str):
        return None
    return values


def _has_delta_channels(graph: Any) -> bool:
    """True when a channel of the graph, or of a subgraph, is rebuilt from
    earlier steps' writes: its checkpoint then needs the whole history."""
    delta = getattr(sys.modules.get("langgraph.channels.delta"), "DeltaChannel", None)
    if not isinstance(delta, type):
        return False
    graphs = [graph, *(sub for _, sub in graph.get_subgraphs(recurse=True))]
    return any(isinstance(channel, delta) for each in graphs for channel in each.channels.values())
