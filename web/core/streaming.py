"""Streams of task events: SendStreamingMessage, SubscribeToTask and their 0.3 names.

A stream is the task's own event log, followed from the store (so any front
end serves any task, whichever process runs it): first the Task as of some
event N, then every event after N in order, each a JSON-RPC response with
the event number as its SSE id. It ends after a terminal state, or when the
task stops for the peer (input-required, auth-required) during the stream.

- A send stream buffers its first events until the agent's first output:
  if the agent answers with a message, the stream is that message alone.
- A reconnecting client sends `Last-Event-ID: N` and gets exactly the
  events after N, then live ones (without a Task first: it has it).
- Wherever the log no longer holds the next event a stream needs (a
  resume from long ago, a client so slow the log was trimmed past it, a
  store that lost its last writes), the stream sends the Task as it
  stands instead and goes on from there (see `shared.store.follow`).
- A send repeated without `Last-Event-ID` (the same messageId: a client
  that lost the first stream's reply) is answered as a subscribe is: the
  Task as it stands, then what follows; a finished task is that Task alone.
- The user's own follow-up messages are in the Task's history, and are not
  repeated as events.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from shared.dialects import V03, event_for, task_for
from shared.errors import StoreError
from shared.events import Event
from shared.ops.event_metrics import gaps_of
from shared.store.contract import Record, Store
from shared.store.follow import Followed, Interrupt, follow, is_final, is_stopped
from shared.task import WORKING, is_at_rest, is_terminal, state_of
from web.core.errors import UnsupportedOperation, describe, error_body, status_body
from web.core.params import SendParams
from web.core.tasks import Tasks, owned

log = logging.getLogger(__name__)

# (SSE id, JSON-RPC response or bare StreamResponse), or None: a keepalive
# comment is due. An error ends a stream with SSE id 0.
Item = tuple[int, dict[str, Any]] | None


@dataclass(frozen=True)
class Wire:
    """How one stream's responses are shaped, and who is listening."""

    version: str
    request_id: object
    keepalive: float
    interrupt: Interrupt | None = None  # set when the client hangs up
    enveloped: bool = True  # False: bare StreamResponses (HTTP+JSON)
    # Set by an event loop driving the stream: where it would wait, the
    # stream yields None at once, and this is called when there may be more.
    nudge: Callable[[], object] | None = None

    def result(self, seq: int, payload: dict[str, Any]) -> Item:
        if not self.enveloped:
            return seq, payload
        return seq, {"jsonrpc": "2.0", "id": self.request_id, "result": payload}

    def task(self, record: Record) -> Item:
        shaped = task_for(self.version, record.task)
        if self.version != V03:
            shaped = {"task": shaped}
        return self.result(record.seq, shaped)

    def event(self, seq: int, event: Event) -> Item:
        return self.result(seq, event_for(self.version, event))

    def error(self, error: Exception, task_id: str) -> Item:
        wire = describe(error, task_id=task_id)
        if not self.enveloped:
            return 0, status_body(wire)
        return 0, error_body(wire, self.request_id, typed_data=self.version != V03)


@dataclass(frozen=True)
class Stream:
    """A checked request whose answer is a stream: `open` starts it, once the
    connection it goes out on is known (so a hang-up can end it at once)."""

    wire: Wire
    task_id: str
    body: Callable[[Wire], Iterator[Item]]

    def open(
        self, interrupt: Interrupt | None = None, nudge: Callable[[], object] | None = None
    ) -> Iterator[Item]:
        """The stream's items; with `nudge`, one that never blocks (see
        `shared.store.follow.follow`): None means "ask again once nudged"."""
        wire = replace(self.wire, interrupt=interrupt, nudge=nudge)
        return _guarded(wire, self.task_id, self.body(wire))


def send_stream(
    tasks: Tasks, request: SendParams, owner: str, wire: Wire, resume_after: int | None
) -> Stream:
    store = _events_store(tasks)
    sent = tasks.accept(request, owner)
    task_id = sent.task["id"]
    record = Record(sent.task, sent.seq, 0)
    if resume_after is not None:
        return Stream(wire, task_id, partial(_resumed, store, record, resume_after))
    if sent.repeated:
        current = store.read(task_id) or record
        return Stream(wire, task_id, partial(_from_snapshot, store, current, ends_at_rest=True))
    return Stream(wire, task_id, partial(_first_output, store, record))


def subscription(
    tasks: Tasks, task_id: str, owner: str, wire: Wire, resume_after: int | None
) -> Stream:
    store = _events_store(tasks)
    record = store.read(task_id)
    owned(record.task if record else None, task_id, owner)
    assert record is not None
    finished = is_terminal(state_of(record.task))
    # At (or, after a store lost its last writes, beyond) the latest event of
    # a live task, a resume is what comes next, or the task as it stands.
    if resume_after is not None and (resume_after < record.seq or not finished):
        return Stream(wire, task_id, partial(_resumed, store, record, resume_after))
    if finished:
        raise UnsupportedOperation(
            f"task {task_id} is {state_of(record.task)}: a finished task has no more events"
        )
    return Stream(wire, task_id, partial(_from_snapshot, store, record))


def _events_store(tasks: Tasks) -> Store:
    return tasks.store


def _first_output(store: Store, created: Record, wire: Wire) -> Iterator[Item]:
    """Buffer until the agent first says something: a direct reply is sent
    alone; anything else is preceded by the Task as it was created."""
    following = _following(store, wire, created.task["id"], created.seq)
    buffered: list[tuple[int, Event]] = []
    for item in following:
        if item is None:
            yield None
            continue
        if isinstance(item, Record):
            # The log moved on past what was buffered: the task as it stands says it all.
            yield wire.task(item)
            if not is_stopped(item.task):
                yield from _shown(wire, following)
            return
        seq, event = item
        if event["kind"] == "message" and event.get("role") == "agent":
            yield wire.event(seq, event)
            return
        buffered.append(item)
        if not _is_claim(event):
            break
    else:
        return
    yield wire.task(created)
    yield from _shown(wire, buffered)
    if not is_final(buffered[-1][1]):
        yield from _shown(wire, following)


def _from_snapshot(
    store: Store, record: Record, wire: Wire, *, ends_at_rest: bool = False
) -> Iterator[Item]:
    """The Task, then what follows it; nothing follows a finished task, nor,
    for a send (`ends_at_rest`), one that waits for the peer."""
    yield wire.task(record)
    state = state_of(record.task)
    if not (is_terminal(state) or (ends_at_rest and is_at_rest(state))):
        yield from _shown(wire, _following(store, wire, record.task["id"], record.seq))


def _resumed(store: Store, record: Record, after: int, wire: Wire) -> Iterator[Item]:
    """The events after `after`; the task as it stands where the log no
    longer holds them, or where `after` is beyond the task's last event (an
    id from numbers a store lost: what took them since is another event)."""
    task_id = record.task["id"]
    if after > record.seq and (current := store.read(task_id) or record).seq < after:
        gaps_of("resume").inc()
        log.info("task %s: resume after %d, beyond its last event %d", task_id, after, current.seq)
        yield from _from_snapshot(store, current, wire)
        return
    yield from _shown(wire, _following(store, wire, task_id, after, reader="resume"))


def _following(
    store: Store, wire: Wire, task_id: str, after: int, *, reader: str = "stream"
) -> Iterator[Followed]:
    return follow(
        store,
        task_id,
        after,
        deadline=float("inf"),
        idle=wire.keepalive,
        interrupt=wire.interrupt,
        reader=reader,
        nudge=wire.nudge,
    )


def _shown(wire: Wire, items: Any) -> Iterator[Item]:
    for item in items:
        if item is None:
            yield None
            continue
        if isinstance(item, Record):
            yield wire.task(item)
            continue
        seq, event = item
        if event["kind"] == "message" and event.get("role") == "user":
            continue  # the peer's own follow-up: already in the Task's history
        yield wire.event(seq, event)


def _guarded(wire: Wire, task_id: str, items: Iterator[Item]) -> Iterator[Item]:
    """A store failure mid-stream ends the stream with an error event, never a hang."""
    try:
        yield from items
    except StoreError as error:
        log.warning("task %s: stream ended by a store fault: %s", task_id, error)
        yield wire.error(error, task_id)


def _is_claim(event: Event) -> bool:
    return (
        event["kind"] == "status-update"
        and event["status"]["state"] == WORKING
        and "message" not in event["status"]
    )
