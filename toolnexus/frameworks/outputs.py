"""The values every framework adapter yields, written once.

What a peer sees is the same whichever framework runs the agent: the model's
text as chunks of one artifact (`result`), a tool call and its result each as
a status message naming the tool with a data part (the arguments, the
result), structured output as a data artifact (`output`), and a question
back to the user as `Ask`, after a `Checkpoint` holding what the framework
needs to go on when the answer comes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from toolnexus import Artifact, Ask, Checkpoint, Chunk, Data, Done, Parts, Progress

# The artifact the model's text streams into; a plain function's string
# result lands under the same name.
TEXT_ARTIFACT = "result"
# The artifact structured output lands in.
OUTPUT_ARTIFACT = "output"


def text_chunk(delta: str) -> Chunk:
    """A piece of the model's text, as it is produced."""
    return Chunk(delta, artifact=TEXT_ARTIFACT)


def text_end() -> Chunk:
    """The end of the model's text: an empty last chunk closes the artifact."""
    return Chunk("", artifact=TEXT_ARTIFACT, last=True)


def tool_called(name: str, arguments: Any, call_id: str | None = None) -> Progress:
    """A tool call the model made: the tool's name, and its arguments as data."""
    return Progress(
        [
            f"calling tool {name}",
            Data({"tool": name, "callId": call_id, "arguments": jsonable(arguments)}),
        ]
    )


def tool_returned(name: str, result: Any, call_id: str | None = None) -> Progress:
    """A tool's result, as the framework handed it back to the model."""
    return Progress(
        [
            f"tool {name} returned",
            Data({"tool": name, "callId": call_id, "result": jsonable(result)}),
        ]
    )


def structured(value: Any) -> Artifact:
    """Structured output (a typed result, a graph's state) as a data artifact."""
    return Artifact(Data(jsonable(value)), name=OUTPUT_ARTIFACT)


def ask(question: Parts, state: Any) -> tuple[Checkpoint, Ask]:
    """A question back to the user (text, or parts: a data part may say what
    waits for the answer): yield the checkpoint, then the Ask. The run that
    answers it gets `state` as its `checkpoint`."""
    return Checkpoint(jsonable(state)), Ask(question)


def done(streamed_text: bool, text: str | None = None) -> Done:
    """The end of a run: the streamed artifact is the result; text that was
    not streamed (a framework that gave only its final answer) becomes it."""
    if streamed_text or not text:
        return Done()
    return Done(artifacts=[Artifact(text, name=TEXT_ARTIFACT)])


def jsonable(value: Any) -> Any:
    """`value` as JSON: pydantic models dumped, mappings and sequences walked,
    anything else by its `str`."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return jsonable(dump(mode="json"))
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return str(value)
