"""Read Server-Sent Events over real HTTP, as a streaming A2A client does."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import requests


@dataclass(frozen=True)
class Event:
    id: int | None
    data: dict[str, Any]


class Stream:
    """One POSTed streaming request; iterate for its events (comments are
    counted and kept in `comment_lines`, not yielded); `close()` hangs up."""

    def __init__(
        self,
        url: str,
        method: str,
        params: dict[str, Any],
        *,
        version: str | None = "1.0",
        last_event_id: int | None = None,
        timeout: float = 30,
    ) -> None:
        headers = {"Accept": "text/event-stream"}
        if version is not None:
            headers["A2A-Version"] = version
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
        self.response = requests.post(
            f"{url.rstrip('/')}/", json=body, headers=headers, stream=True, timeout=timeout
        )
        self.comments = 0
        self.comment_lines: list[str] = []

    @property
    def is_stream(self) -> bool:
        return self.response.headers.get("Content-Type", "").startswith("text/event-stream")

    def json(self) -> dict[str, Any]:
        """The reply when it is not a stream (an error before the stream began)."""
        reply: dict[str, Any] = self.response.json()
        return reply

    def __iter__(self) -> Iterator[Event]:
        event_id: int | None = None
        data: list[str] = []
        for raw in self.response.iter_lines(decode_unicode=True):
            line = raw if isinstance(raw, str) else raw.decode()
            if line.startswith(":"):
                self.comments += 1
                self.comment_lines.append(line)
            elif line.startswith("id:"):
                event_id = int(line[3:].strip())
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif line == "" and data:
                yield Event(event_id, json.loads("\n".join(data)))
                event_id, data = None, []

    def close(self) -> None:
        self.response.close()


def results(events: list[Event]) -> list[dict[str, Any]]:
    """The `result` of each event (asserting none is an error)."""
    for event in events:
        assert "result" in event.data, event.data
    return [event.data["result"] for event in events]


class RestStream(Stream):
    """One HTTP+JSON streaming request (`POST /message:stream`, `GET` or
    `POST /tasks/{id}:subscribe`): its events are bare StreamResponses."""

    def __init__(
        self,
        url: str,
        verb: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        version: str | None = "1.0",
        last_event_id: int | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> None:
        sent = {"Accept": "text/event-stream", **(headers or {})}
        if version is not None:
            sent["A2A-Version"] = version
        if last_event_id is not None:
            sent["Last-Event-ID"] = str(last_event_id)
        self.response = requests.request(
            verb, f"{url.rstrip('/')}{path}", json=body, headers=sent, stream=True, timeout=timeout
        )
        self.comments = 0
        self.comment_lines: list[str] = []
