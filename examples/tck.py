"""The agent the official A2A conformance kit (a2aproject/a2a-tck) expects.

    TOOLNEXUS_RUN=examples.tck:agent

The kit's scenarios (`scenarios/*.feature` on its 1.0-dev branch) choose a
behaviour by the prefix of the message id. This is written on the public
agent contract only (`toolnexus` results, an async generator for the
streamed ones): the proof that the contract can do what the kit asks,
with no special path in the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from shared.task import Message
from toolnexus import Artifact, Ask, Chunk, Data, Done, File, Progress, Reject, Reply

OUTPUT_FILE = File(content=b"tck", name="output.txt", media_type="text/plain")


async def _streamed(*items: Any, pause: float = 0.0) -> AsyncIterator[Any]:
    """Yield each item in turn (after an optional pause), then end: completed."""
    for item in items:
        if pause:
            await asyncio.sleep(pause)
        yield item


BEHAVIOURS: dict[str, Callable[[], Any]] = {
    "tck-complete-task": lambda: "Hello from TCK",
    "tck-input-required": lambda: Ask("Please provide more input (TCK input-required)."),
    "tck-artifact-text": lambda: Artifact("Generated text content"),
    "tck-artifact-file-url": lambda: Artifact(
        File(url="https://example.com/output.txt", name="output.txt", media_type="text/plain")
    ),
    "tck-artifact-file": lambda: Artifact(OUTPUT_FILE),
    "tck-artifact-data": lambda: Artifact(Data({"key": "value", "count": 42})),
    "tck-message-response": lambda: Reply("Direct message response"),
    "tck-reject-task": lambda: Reject("rejected"),
    "tck-stream-001": lambda: _streamed(Artifact("Stream hello from TCK")),
    "tck-stream-002": lambda: Done("Stream completed"),
    "tck-stream-003": lambda: _streamed(Artifact("Stream task lifecycle")),
    "tck-stream-ordering-001": lambda: _streamed(Artifact("Ordered output")),
    "tck-stream-artifact-text": lambda: _streamed(Artifact("Streamed text content")),
    "tck-stream-artifact-file": lambda: _streamed(Artifact(OUTPUT_FILE)),
    "tck-stream-artifact-chunked": lambda: _streamed(
        Chunk("chunk-1 ", artifact="chunked"), Chunk("chunk-2", artifact="chunked", last=True)
    ),
    # The 0.3 kit's resubscribe test: stays working for twice its stream timeout.
    "test-resubscribe-message-id": lambda: _streamed(Progress("working"), "still working", pause=2),
}
# Longest first, so "tck-artifact-file-url" is not taken for "tck-artifact-file".
_PREFIXES = sorted(BEHAVIOURS, key=len, reverse=True)


def agent(message: Message) -> Any:
    message_id = message.get("messageId", "")
    for prefix in _PREFIXES:
        if message_id.startswith(prefix):
            return BEHAVIOURS[prefix]()
    if message_id.startswith("tck-"):
        return Done(f"Unhandled messageId prefix: {message_id}")
    # The 0.3 kit's own ids: it cancels and continues the tasks it creates,
    # so they wait for the peer instead of finishing at once.
    return Ask("Send another message to continue this task.")
