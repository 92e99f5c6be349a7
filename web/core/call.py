"""One call, as the handler (`web.core.handler`) runs it: the dialect that
shapes its answer, and the call context every binding builds for it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from web.core.errors import InvalidRequest
from web.core.streaming import Wire
from web.core.tasks import Tasks

# The extended agent card in a wire version (V03 or V10).
ExtendedCard = Callable[[str], Mapping[str, Any]]


@dataclass(frozen=True)
class Dialect:
    name: str
    version: str  # which wire shapes: V03 (the stored ones) or V10
    blocking: bool  # SendMessage's default when the request does not say
    wraps_send: bool  # 1.0: SendMessage answers {"task": ...} or {"message": ...}
    enveloped: bool = True  # stream events in JSON-RPC responses (HTTP+JSON, gRPC: bare)


@dataclass(frozen=True)
class Call:
    """One request, checked: who asks, in which dialect, with which request id."""

    tasks: Tasks
    dialect: Dialect
    owner: str
    request_id: object
    last_event_id: str | None  # the Last-Event-ID header: only streams read it
    extended_card: ExtendedCard | None = None  # None: this agent offers none

    @property
    def resume_after(self) -> int | None:
        """The stream event the peer saw last, if it says so."""
        return last_event(self.last_event_id)

    @property
    def wire(self) -> Wire:
        return Wire(
            self.dialect.version,
            self.request_id,
            self.tasks.keepalive,
            enveloped=self.dialect.enveloped,
        )


def last_event(header: str | None) -> int | None:
    """The `Last-Event-ID` header (gRPC: `last-event-id` metadata) as an event
    number; None when absent. InvalidRequest when it is not one."""
    if header is None or not header.strip():
        return None
    try:
        after = int(header.strip())
    except ValueError:
        after = -1
    if after < 0:
        raise InvalidRequest("Last-Event-ID must be an event number this server sent")
    return after
