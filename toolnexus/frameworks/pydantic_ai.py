"""Serving a Pydantic AI `Agent` as it is.

The agent runs through its own event stream (`run_stream_events`): text
deltas become chunks of the `result` artifact, function tool calls and
their results become progress, and typed output becomes the `output` data
artifact. A run that ends on deferred tool calls (a tool with
`requires_approval=True`, or one that raises `ApprovalRequired` or
`CallDeferred`) asks the peer: the checkpoint holds the message history and
the pending call ids, and the peer's answer resumes the run with
`DeferredToolResults`.

Pydantic AI is imported inside the functions only: `toolnexus.frameworks`
imports every adapter, installed or not.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from toolnexus import Data, File, parts_of
from toolnexus.frameworks import outputs
from toolnexus.frameworks.facts import Facts, Skill

# Marks a checkpoint as this adapter's pause on deferred tool calls.
STATE_KIND = "pydantic_ai.deferred"

# Answers that approve a pending call; anything else denies it.
YES = frozenset({"yes", "y", "ok", "okay", "approve", "approved", "allow", "go ahead", "sure"})
NO = frozenset({"no", "n", "deny", "denied", "reject", "stop", "cancel"})


def recognizes(obj: object) -> bool:
    """True for a `pydantic_ai.Agent`, once the agent's module imported Pydantic AI."""
    module = sys.modules.get("pydantic_ai")
    return module is not None and isinstance(obj, module.Agent)


def run_function(obj: Any) -> Callable[..., AsyncIterator[object]]:
    """An agent function that runs `obj` on the latest message, with the
    context's earlier messages as its history."""
    from pydantic_ai import ModelMessagesTypeAdapter
    from pydantic_ai.messages import (
        FunctionToolCallEvent,
        FunctionToolResultEvent,
        PartDeltaEvent,
        PartStartEvent,
        TextPart,
        TextPartDelta,
    )
    from pydantic_ai.run import AgentRunResultEvent
    from pydantic_ai.tools import DeferredToolRequests

    agent = obj
    output_type = _output_type_with_deferred(agent)

    async def run(
        message: Mapping[str, Any],
        conversation: Sequence[Mapping[str, Any]] | None = None,
        checkpoint: Any = None,
    ) -> AsyncIterator[object]:
        state = checkpoint if _is_pause(checkpoint) else None
        if state is not None and _same_message(state, message):
            # Another attempt of the run that asked: the question still stands.
            saved, question = outputs.ask(state["question"], state)
            yield saved
            yield question
            return
        if state is not None:
            prompt = None
            history = ModelMessagesTypeAdapter.validate_python(state["messages"])
            results = _results(state, message)
        else:
            prompt = _prompt(message)
            history = _history(conversation or ())
            results = None

        chunk = outputs.text_chunk
        streamed = False
        result: Any = None
        async with agent.run_stream_events(
            prompt,
            message_history=history or None,
            deferred_tool_results=results,
            output_type=output_type,
            infer_name=False,
        ) as events:
            async for event in events:
                # The text deltas come by the hundred: they are looked for first.
                if isinstance(event, PartDeltaEvent):
                    delta = event.delta
                    if isinstance(delta, TextPartDelta) and delta.content_delta:
                        streamed = True
                        yield chunk(delta.content_delta)
                elif isinstance(event, PartStartEvent):
                    part = event.part
                    if isinstance(part, TextPart) and part.content:
                        streamed = True
                        yield chunk(part.content)
                elif isinstance(event, FunctionToolCallEvent):
                    call = event.part
                    yield outputs.tool_called(call.tool_name, _arguments(call), call.tool_call_id)
                elif isinstance(event, FunctionToolResultEvent):
                    returned = event.part
                    yield outputs.tool_returned(
                        returned.tool_name, _plain(returned.content), returned.tool_call_id
                    )
                elif isinstance(event, AgentRunResultEvent):
                    result = event.result
            messages = events.all_messages()

        output = result.output if result is not None else None
        if streamed:
            yield outputs.text_end()
        if isinstance(output, DeferredToolRequests):
            pause = _pause(output, ModelMessagesTypeAdapter.dump_python(messages, mode="json"))
            pause["askedAfter"] = message.get("messageId")
            saved, question = outputs.ask(pause["question"], pause)
            yield saved
            yield question
            return
        if output is not None and not isinstance(output, str):
            yield outputs.structured(_plain(output))
            yield outputs.done(streamed)
            return
        yield outputs.done(streamed, output)

    return run


def facts(obj: Any) -> Facts:
    """The agent's name, its static instructions (or description) and one
    skill per function tool."""
    from pydantic_ai.toolsets import FunctionToolset

    found: list[Any] = []

    def visit(toolset: Any) -> None:
        if isinstance(toolset, FunctionToolset):
            found.append(toolset)

    for toolset in obj.toolsets:
        toolset.apply(visit)
    skills = tuple(
        Skill(id=tool.name, name=tool.name, description=tool.description or "")
        for toolset in found
        for tool in toolset.tools.values()
    )
    return Facts(name=obj.name, description=_description(obj), skills=skills)


# --- the run's input ----------------------------------------------------------


def _prompt(message: Mapping[str, Any]) -> str | list[Any] | None:
    """The message as a user prompt: its text alone when it is only text."""
    content = _content(message)
    if not content:
        return None
    return _text_of(content) if all(isinstance(each, str) for each in content) else content


def _content(message: Mapping[str, Any]) -> list[Any]:
    """A message's parts as Pydantic AI user content: text as it is, data as
    its JSON, files as binary content or a link of their kind."""
    from pydantic_ai import AudioUrl, BinaryContent, DocumentUrl, ImageUrl, VideoUrl

    content: list[Any] = []
    for part in parts_of(message):
        if isinstance(part, str):
            content.append(part)
        elif isinstance(part, Data):
            content.append(json.dumps(part.value))
        elif isinstance(part, File):
            media_type = part.media_type or "application/octet-stream"
            if part.content is not None:
                content.append(BinaryContent(part.content, media_type=media_type))
            else:
                kind = media_type.split("/", 1)[0]
                link = {"image": ImageUrl, "audio": AudioUrl, "video": VideoUrl}.get(
                    kind, DocumentUrl
                )
                content.append(link(url=part.url or "", media_type=part.media_type))
    return content


def _history(conversation: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The context's earlier messages as Pydantic AI messages: the user's as
    requests, the agent's as responses holding its text."""
    from pydantic_ai import ModelRequest, ModelResponse, TextPart, UserPromptPart

    history: list[Any] = []
    for earlier in conversation:
        content = _prompt(earlier)
        if not content:
            continue
        if earlier.get("role") == "agent":
            text = content if isinstance(content, str) else _text_of(content)
            history.append(ModelResponse(parts=[TextPart(content=text)]))
        else:
            history.append(ModelRequest(parts=[UserPromptPart(content=content)]))
    return history


def _text_of(content: list[Any]) -> str:
    return "\n".join(each for each in content if isinstance(each, str))


def _output_type_with_deferred(agent: Any) -> Any:
    """The run's output type: the agent's, able to end on deferred tool calls.

    An agent whose output type leaves `DeferredToolRequests` out would fail
    its run when a tool asks for approval; the run adds it. None (the
    agent's own) when it is there already, or when the agent has output
    validators (a run may then not change the output type)."""
    from pydantic_ai import DeferredToolRequests

    declared = agent.output_type
    listed = isinstance(declared, Sequence | set) and not isinstance(declared, str)
    members = list(declared) if listed else [declared]
    if DeferredToolRequests in members or agent._output_validators:
        return None
    return [*members, DeferredToolRequests]


# --- a pause on deferred tool calls ----------------------------------------------


def _pause(requests: Any, messages: Any) -> dict[str, Any]:
    """The checkpoint of a run that ended on deferred tool calls, with the
    question for the peer."""
    lines = [
        f"Approve {call.tool_name} with {json.dumps(_arguments(call))}?"
        for call in requests.approvals
    ]
    lines += [
        f"The agent waits for the result of {call.tool_name} with {json.dumps(_arguments(call))}."
        for call in requests.calls
    ]
    if requests.approvals:
        lines.append("Answer yes or no.")
    return {
        "kind": STATE_KIND,
        "messages": messages,
        "approvals": [call.tool_call_id for call in requests.approvals],
        "calls": [call.tool_call_id for call in requests.calls],
        "question": "\n".join(lines),
    }


def _is_pause(checkpoint: Any) -> bool:
    return isinstance(checkpoint, Mapping) and checkpoint.get("kind") == STATE_KIND


def _same_message(state: Mapping[str, Any], message: Mapping[str, Any]) -> bool:
    """True when `message` is the one the question was asked after (a later
    attempt of that run), not the peer's answer."""
    asked_after = state.get("askedAfter")
    return bool(asked_after) and asked_after == message.get("messageId")


def _results(state: Mapping[str, Any], message: Mapping[str, Any]) -> Any:
    """The peer's answer as `DeferredToolResults`.

    A data part `{"approve": true}` (or `{"approve": {callId: bool}}`, with
    an optional `"reason"` for a denial) decides the approvals; so does a
    text answer, approving on yes and otherwise denying with the text as the
    reason the model reads. A call waiting for an external result gets the
    data part's `"results"` entry for its id, or else the whole answer."""
    from pydantic_ai import DeferredToolResults, ToolDenied

    parts = parts_of(message)
    data = next((p.value for p in parts if isinstance(p, Data)), None)
    text = "\n".join(p for p in parts if isinstance(p, str)).strip()
    decision = data.get("approve") if isinstance(data, Mapping) else None
    reason = data.get("reason") if isinstance(data, Mapping) else None
    if decision is None and text:
        word = text.lower().rstrip(".!")
        decision = word in YES
        if word not in YES | NO:
            reason = text

    approvals: dict[str, Any] = {}
    for call_id in state["approvals"]:
        approved = decision.get(call_id) if isinstance(decision, Mapping) else decision
        if approved is True:
            approvals[call_id] = True
        elif isinstance(reason, str) and reason:
            approvals[call_id] = ToolDenied(reason)
        else:
            approvals[call_id] = False

    given = data.get("results") if isinstance(data, Mapping) else None
    answer = data if data is not None else text
    calls = {
        call_id: given[call_id] if isinstance(given, Mapping) and call_id in given else answer
        for call_id in state["calls"]
    }
    return DeferredToolResults(approvals=approvals, calls=calls)


# --- values shown to the peer ---------------------------------------------------


def _arguments(call: Any) -> Any:
    """A tool call's arguments as a JSON object (its raw text when it is none)."""
    try:
        return call.args_as_dict(raise_if_invalid=True)
    except (ValueError, AssertionError):
        return call.args


def _plain(value: Any) -> Any:
    """A tool result or an output as JSON values (dataclasses, dates, bytes...)."""
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value, serialize_unknown=True, bytes_mode="base64")


def _description(agent: Any) -> str | None:
    """The agent's description, or else its static instructions and system
    prompts (those written as plain strings), one per paragraph."""
    from pydantic_ai.messages import InstructionPart

    if agent.description:
        return str(agent.description)
    texts: list[str] = []
    for sourced in agent._instructions:
        instruction = sourced.instruction
        if isinstance(instruction, InstructionPart) and not instruction.dynamic:
            texts.append(instruction.content)
        elif isinstance(instruction, str):
            texts.append(instruction)
    texts.extend(prompt for prompt in agent._system_prompts if isinstance(prompt, str))
    return "\n\n".join(texts) or None
