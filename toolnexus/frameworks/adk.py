"""Google ADK agents, served as they are.

Each run rebuilds an in-memory ADK session (from the context's earlier
exchange, or from the session kept with a question the agent asked) and runs
the agent with ADK's own `Runner` in SSE streaming mode: partial text events
become chunks, function calls and responses become tool progress, and a
long-running tool (`LongRunningFunctionTool`) becomes a question back to the
user, answered by the follow-up as that function's response.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import aclosing
from typing import Any

from toolnexus import Data, File, PartLike, parts_of
from toolnexus.frameworks import outputs
from toolnexus.frameworks.facts import Facts, Skill
from toolnexus.frameworks.inputs import as_text, part_as_text

# The names the session is kept under: one user and one app per run, the
# session itself dropped when the run ends.
_APP = "toolnexus"
_USER = "peer"


def recognizes(obj: object) -> bool:
    """An ADK agent (any `BaseAgent`), when ADK was imported to build it."""
    agents = sys.modules.get("google.adk.agents")
    if agents is None:
        return False
    base = getattr(agents, "BaseAgent", None)
    return isinstance(base, type) and isinstance(obj, base)


def facts(obj: Any) -> Facts:
    """The agent's name, its description (or its instruction when that is
    text), and a skill per tool of the agent and its sub-agents."""
    description = getattr(obj, "description", None) or None
    instruction = getattr(obj, "instruction", None)
    if description is None and isinstance(instruction, str) and instruction:
        description = instruction
    skills: dict[str, Skill] = {}
    for name, text in _tools_of(obj):
        skills.setdefault(name, Skill(id=name, name=name, description=text))
    return Facts(
        name=getattr(obj, "name", None) or None,
        description=description,
        skills=tuple(skills.values()),
    )


def _tools_of(agent: Any) -> Iterable[tuple[str, str]]:
    """(name, description) of each tool an agent holds, its sub-agents' after
    its own; toolsets are left out (their tools are listed only by awaiting
    them)."""
    for tool in getattr(agent, "tools", None) or ():
        name = getattr(tool, "name", None) or getattr(tool, "__name__", None)
        if not isinstance(name, str) or not name:
            continue
        text = getattr(tool, "description", None)
        if not isinstance(text, str):
            text = (getattr(tool, "__doc__", None) or "").strip()
        yield name, text
    for sub in getattr(agent, "sub_agents", None) or ():
        yield from _tools_of(sub)


def run_function(obj: Any) -> Callable[..., AsyncIterator[object]]:
    """An async generator function running `obj` for one task."""

    async def run_adk_agent(
        message: Mapping[str, Any],
        conversation: list[Mapping[str, Any]] | None = None,
        checkpoint: Any = None,
    ) -> AsyncIterator[object]:
        from google.adk.agents import RunConfig
        from google.adk.agents.run_config import StreamingMode  # type: ignore[attr-defined]
        from google.adk.runners import Runner
        from google.adk.sessions import InMemorySessionService

        service = InMemorySessionService()
        runner = Runner(app_name=_APP, agent=obj, session_service=service)
        session = await service.create_session(app_name=_APP, user_id=_USER)
        pending = _pending_calls(checkpoint)
        if pending:
            for event in _saved_events(checkpoint):
                await service.append_event(session, event)
            new_message = _answer(pending, message)
        else:
            for event in _conversation_events(conversation or (), getattr(obj, "name", "agent")):
                await service.append_event(session, event)
            new_message = _content("user", parts_of(message))
        stream = _Stream(structured_output=getattr(obj, "output_schema", None) is not None)
        try:
            run = runner.run_async(
                user_id=_USER,
                session_id=session.id,
                new_message=new_message,
                run_config=RunConfig(streaming_mode=StreamingMode.SSE),
            )
            async with aclosing(run) as events:
                async for event in events:
                    for value in stream.read(event):
                        yield value
                    if stream.answered_long_running:
                        break
            for value in stream.finish():
                yield value
            if stream.asked:
                saved = await service.get_session(
                    app_name=_APP, user_id=_USER, session_id=session.id
                )
                state = {
                    "events": [e.model_dump(mode="json", exclude_none=True) for e in saved.events]
                    if saved
                    else [],
                    "pending": stream.asked,
                }
                checkpoint_value, question = outputs.ask(stream.question(), state)
                yield checkpoint_value
                yield question
                return
            yield outputs.done(stream.streamed)
        finally:
            await runner.close()

    run_adk_agent.__name__ = getattr(obj, "name", None) or run_adk_agent.__name__
    return run_adk_agent


class _Stream:
    """ADK's events of one run, read into toolnexus values."""

    def __init__(self, structured_output: bool) -> None:
        self.structured_output = structured_output
        self.streamed = False
        # Whether text of the model response in progress arrived in partial
        # events (its final event then repeats it whole).
        self.partial_text = False
        self.texts_seen = False
        self.last_text = ""
        # The long-running calls made (id and name), the arguments of each
        # and what each returned for now, by call id.
        self.asked: list[dict[str, Any]] = []
        self.arguments: dict[str, Any] = {}
        self.responses: dict[str, Any] = {}
        self.answered_long_running = False
        self.output_sent = False

    def read(self, event: Any) -> Iterable[object]:
        if event.error_code or event.error_message:
            raise _error_of(event.error_code, event.error_message)
        parts = list(event.content.parts or ()) if event.content is not None else []
        if event.partial:
            for part in parts:
                if part.text and not part.thought:
                    yield from self._text(part.text)
                    self.partial_text = True
            return
        texts = [p.text for p in parts if p.text and not p.thought]
        if texts:
            self.last_text = "".join(texts)
            if not self.partial_text:
                yield from self._text(self.last_text)
        self.partial_text = False
        if texts:
            self.texts_seen = True
        long_running = set(event.long_running_tool_ids or ())
        for part in parts:
            call = part.function_call
            if call is not None:
                yield outputs.tool_called(call.name or "", call.args or {}, call.id)
                if call.id in long_running:
                    self.asked.append({"id": call.id, "name": call.name})
                    self.arguments[call.id or ""] = outputs.jsonable(call.args or {})
            reply = part.function_response
            if reply is not None:
                yield outputs.tool_returned(reply.name or "", reply.response, reply.id)
                if any(asked["id"] == reply.id for asked in self.asked):
                    self.responses[reply.id or ""] = outputs.jsonable(reply.response)
                    self.answered_long_running = True
        if event.output is not None:
            # A task-mode agent's result, which ADK puts on its last event.
            self.output_sent = True
            yield outputs.structured(event.output)

    def _text(self, text: str) -> Iterable[object]:
        if not self.partial_text and self.texts_seen and self.streamed:
            # A later model response's text, set apart from the one before.
            yield outputs.text_chunk("\n\n")
        self.texts_seen = False
        self.streamed = True
        yield outputs.text_chunk(text)

    def finish(self) -> Iterable[object]:
        if self.streamed:
            yield outputs.text_end()
        if self.structured_output and self.last_text and not self.asked and not self.output_sent:
            try:
                value = json.loads(self.last_text)
            except ValueError:
                return
            yield outputs.structured(value)

    def question(self) -> str:
        """The question asked: what each long-running tool returned for now
        (its `question`, else its text), else its name and arguments."""
        lines = []
        for asked in self.asked:
            call_id = asked["id"] or ""
            lines.append(
                _question_of(
                    asked["name"], self.arguments.get(call_id), self.responses.get(call_id)
                )
            )
        return "\n".join(lines)


class AdkError(RuntimeError):
    """An error ADK reported as an event (an exception in the model or a
    tool, a model's error response) rather than raised."""


def _error_of(code: str | None, message: str | None) -> AdkError:
    """The error an event reports, its class named after its code (the
    exception's type, or the model's error code), so the failed task reads
    `ValueError: ...` as it would had the agent's code raised it."""
    if code and code.isidentifier():
        named: type[AdkError] = type(code, (AdkError,), {})
        return named(message or code)
    return AdkError(
        f"{code}: {message}" if code and message else message or code or "the agent failed"
    )


def _question_of(name: str, arguments: Any, response: Any) -> str:
    if isinstance(response, Mapping):
        for key in ("question", "message", "result"):
            if isinstance(response.get(key), str) and response[key]:
                return str(response[key])
    if response is not None:
        return json.dumps(response)
    return f"{name}({json.dumps(arguments)})"


def _pending_calls(checkpoint: Any) -> list[Mapping[str, Any]]:
    if not isinstance(checkpoint, Mapping):
        return []
    pending = checkpoint.get("pending")
    return [p for p in pending if isinstance(p, Mapping)] if isinstance(pending, list) else []


def _saved_events(checkpoint: Mapping[str, Any]) -> list[Any]:
    from google.adk.events import Event

    return [Event.model_validate(e) for e in checkpoint.get("events") or ()]


def _answer(pending: list[Mapping[str, Any]], message: Mapping[str, Any]) -> Any:
    """The follow-up as each pending long-running call's response: a data
    part that is an object as it is, anything else as `{"result": text}`."""
    from google.genai import types

    parts = parts_of(message)
    if len(parts) == 1 and isinstance(parts[0], Data) and isinstance(parts[0].value, Mapping):
        response = dict(parts[0].value)
    else:
        response = {"result": as_text(parts)}
    return types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(
                    id=p.get("id"), name=p.get("name"), response=response
                )
            )
            for p in pending
        ],
    )


def _conversation_events(conversation: Iterable[Mapping[str, Any]], author: str) -> Iterable[Any]:
    """The context's earlier messages as session events: the user's as the
    user's, the agent's as the model's."""
    from google.adk.events import Event

    invocation = f"e-{uuid.uuid4()}"
    for earlier in conversation:
        parts = parts_of(earlier)
        if not parts:
            continue
        if earlier.get("role") == "user":
            invocation = f"e-{uuid.uuid4()}"
            yield Event(invocation_id=invocation, author="user", content=_content("user", parts))
        else:
            yield Event(invocation_id=invocation, author=author, content=_content("model", parts))


def _content(role: str, parts: Iterable[PartLike]) -> Any:
    from google.genai import types

    converted: list[Any] = []
    for part in parts:
        if isinstance(part, File) and part.content is not None:
            converted.append(
                types.Part(
                    inline_data=types.Blob(
                        data=part.content, mime_type=part.media_type, display_name=part.name
                    )
                )
            )
        elif isinstance(part, File) and part.url:
            converted.append(
                types.Part(
                    file_data=types.FileData(
                        file_uri=part.url, mime_type=part.media_type, display_name=part.name
                    )
                )
            )
        else:
            converted.append(types.Part(text=part_as_text(part)))
    return types.Content(role=role, parts=converted)
