"""The gRPC binding of A2A 1.0 and the 1.1 draft: `lf.a2a.v1.A2AService` on
the transport-free handler.

A thin binding, as HTTP+JSON is: each RPC's request message becomes the
params a JSON-RPC call of the method carries (`web.grpc.wire`), and the
handler (`web.core.handler`) checks and runs them, so the three bindings
share one implementation of every method, its checks (validation,
idempotency by messageId, media types, owner scoping) and its errors. The
RPCs, the method each runs and the message it answers with are the rows of
`web.core.method_table`. The generated servicer and messages are the ones
the a2a-sdk package ships (`a2a.types.a2a_pb2_grpc`), from the spec's own
`a2a.proto`; a 1.1 caller's are the draft's (`web.grpc.draft11`), which
carry the task's generation.

Metadata stands in for HTTP headers: `authorization` (the bearer token,
checked as on the HTTP edge), `a2a-version` (this interface speaks 1.0 and
the 1.1 draft: none means 0.3, refused as §3.6.2 says), `x-request-id`, and
on the streaming RPCs `last-event-id`: resume after that event, as SSE's
`Last-Event-ID` does. A stream's responses carry their event number in
their own `metadata` under `toolnexus.eventId` (a gRPC message has no other
place for it); that is the number to resume after.

Streams follow the task's event log (`web.core.streaming`) and end when the
task is terminal or stops for the peer; a client that cancels its call
ends its stream at once (the call's done-callback wakes the follower).

A 1.1 GetTask with `current_generation` long-polls: it waits until the task's
generation passes it (`web.core.tasks`): here, on grpcio's synchronous server,
on the call's own thread; grpc.aio's binding (`web.grpc.aio`) waits without
one, by `long_poll`, and then answers it as a plain read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Final, NoReturn

import grpc
from a2a.types import a2a_pb2_grpc
from google.protobuf.message import Message as ProtoMessage

from shared.dialects import V10, V11
from shared.ops.correlation import REQUEST_ID_HEADER, accepted_request_id, bind
from shared.ops.tracing import serving
from web.auth.tokens import Authenticator
from web.core.call import Call, Dialect, ExtendedCard
from web.core.errors import (
    InvalidParams,
    InvalidRequest,
    VersionNotSupported,
    describe,
    status_body,
)
from web.core.handler import parse, run
from web.core.method_table import GET, METHOD_TABLE, SEND
from web.core.params import TaskQuery
from web.core.streaming import Stream
from web.core.tasks import Tasks
from web.core.versions import wire_version
from web.grpc.wire import (
    DETAILS_KEY,
    Undecodable,
    message_class,
    message_of,
    params_of,
    rich_status,
)
from web.http.disconnects import Hangup
from web.http.metrics import latency_of, requests_counted, web_metrics

log = logging.getLogger("web.requests")

GRPC: Final = Dialect("grpc", V10, blocking=True, wraps_send=True, enveloped=False)
GRPC_11: Final = replace(GRPC, name="grpc-1.1", version=V11)
_DIALECTS: Final = {V10: GRPC, V11: GRPC_11}
RESUME_KEY: Final = "last-event-id"
EVENT_ID_FIELD: Final = "toolnexus.eventId"
SERVICE: Final = "lf.a2a.v1.A2AService"
_REQUEST_ID_KEY: Final = REQUEST_ID_HEADER.lower()  # gRPC metadata keys are lowercase
# A refusal: the gRPC code, its message, and the serialized google.rpc.Status.
Status = tuple[grpc.StatusCode, str, bytes]
# A message in each wire version, by version.
Replies = Mapping[str, type[ProtoMessage]]


def _replies(name: str) -> Replies:
    return {version: message_class(name, version) for version in _DIALECTS}


# Each unary RPC: the method it runs, and the message it answers with.
UNARY: Final[Mapping[str, tuple[str, Replies]]] = {
    method.name: (method.kind, _replies(method.reply))
    for method in METHOD_TABLE
    if not method.streams
}
# Each streaming RPC: the method it runs (each response a StreamResponse).
STREAMING: Final[Mapping[str, str]] = {
    method.name: method.kind for method in METHOD_TABLE if method.streams
}
STREAM_RESPONSES: Final = _replies("StreamResponse")


@dataclass(frozen=True)
class LongPoll:
    """A long-poll GetTask's wait, for an event loop to drive: `steps(nudge)`
    is `web.core.tasks.Tasks.long_poll_steps`' follower, which ends by `deadline`."""

    deadline: float
    steps: Callable[[Callable[[], object]], Generator[None, None, None]]


class A2AGrpcService(a2a_pb2_grpc.A2AServiceServicer):
    """The A2AService on grpcio's synchronous server; its RPCs, one per entry
    of `UNARY` and `STREAMING`, are set on the class below."""

    def __init__(
        self, tasks: Tasks, authenticator: Authenticator, extended_card: ExtendedCard | None
    ) -> None:
        self._tasks = tasks
        self._authenticator = authenticator
        self._extended_card = extended_card

    def keeps(self, task_id: str) -> bool:
        """Whether GetTask answers for the task without the store."""
        return self._tasks.keeps(task_id)

    # --- one way for every RPC ---------------------------------------------------------

    def _unary(
        self, name: str, kind: str, request: ProtoMessage, context: Any, replies: Replies
    ) -> ProtoMessage:
        answer = self.answer(name, kind, request, metadata_of(context), replies)
        if isinstance(answer, tuple):
            _abort(context, answer)
        return answer

    def answer(
        self,
        name: str,
        kind: str,
        request: ProtoMessage,
        metadata: Mapping[str, str],
        replies: Replies,
        started: float | None = None,
    ) -> ProtoMessage | Status:
        """One unary call, observed and counted (from `started`, when it
        began before: a long-poll GetTask's wait): its reply in the caller's
        version, or the status it is refused with (for the binding's server
        to abort the call with)."""
        outcome = "ok"
        if started is None:
            started = time.monotonic()
        with Observed(name, metadata):
            try:
                call = self._call(metadata)
                result = run(kind, call, _parsed(kind, request))
                # A send's reply is a task made now: never asked for again.
                return message_of(result, replies[call.dialect.version], remember=kind != SEND)
            except Exception as error:
                wire = describe(error)
                outcome = wire.status
                return rich_status(status_body(wire)["error"])
            finally:
                record(name, outcome, started)

    def opened(
        self, name: str, kind: str, request: ProtoMessage, metadata: Mapping[str, str]
    ) -> Stream | Status:
        """A streaming call's checked Stream, or the status it is refused with
        (counted then: a stream that opens is counted when it ends)."""
        started = time.monotonic()
        try:
            stream = run(kind, self._call(metadata), _parsed(kind, request))
            assert isinstance(stream, Stream)
            return stream
        except Exception as error:
            wire = describe(error)
            record(name, wire.status, started)
            return rich_status(status_body(wire)["error"])

    def _stream(self, name: str, kind: str, request: ProtoMessage, context: Any) -> Iterator[Any]:
        metadata = metadata_of(context)
        started, outcome, events = time.monotonic(), "ok", 0
        with Observed(name, metadata):
            stream = self.opened(name, kind, request, metadata)
            if isinstance(stream, tuple):
                _abort(context, stream)
            hangup = Hangup()
            context.add_callback(hangup.fire)
            web_metrics().streams_open.inc()
            try:
                for item in stream.open(hangup):
                    if item is None:
                        continue  # HTTP/2 pings keep the connection alive, not comments
                    response = streamed(item, stream.wire.version)
                    if isinstance(response, tuple):
                        outcome = response[0].name
                        _abort(context, response)
                    events += 1
                    yield response
            finally:
                web_metrics().streams_open.dec()
                record(name, outcome, started, events)

    def long_poll(self, request: ProtoMessage, metadata: Mapping[str, str]) -> LongPoll | None:
        """The wait of a long-poll GetTask (a 1.1 caller's, with `current_generation`),
        for an event loop to drive before it answers the call as a plain read;
        None when there is none to drive: a 1.0 caller's, or a call the
        answer refuses (it says why)."""
        try:
            call = self._call(metadata)
            query = _parsed(GET, request)
        except Exception:
            return None
        if call.dialect.version != V11 or not isinstance(query, TaskQuery):
            return None
        if query.current_generation is None:
            return None
        deadline = time.monotonic() + self._tasks.long_poll_timeout
        return LongPoll(deadline, partial(self._tasks.long_poll_steps, query, call.owner, deadline))

    def _call(self, metadata: Mapping[str, str]) -> Call:
        owner = self._authenticator.principal(metadata.get("authorization"))
        dialect = _DIALECTS.get(wire_version(metadata.get("a2a-version")) or "")
        if dialect is None:
            raise VersionNotSupported(
                "this gRPC interface speaks A2A 1.0 and the 1.1 draft: send the metadata"
                " 'a2a-version: 1.0' or '1.1' (a call without it is A2A 0.3, which this"
                " interface does not serve)"
            )
        return Call(
            self._tasks, dialect, owner, None, metadata.get(RESUME_KEY), self._extended_card
        )


def metadata_of(context: Any) -> dict[str, str]:
    """The call's metadata, first value of each key (keys arrive lowercase);
    binary (`-bin`) entries are not for the methods."""
    found: dict[str, str] = {}
    pairs: Sequence[tuple[str, Any]] = context.invocation_metadata() or ()
    for key, value in pairs:
        if isinstance(value, str):
            found.setdefault(key, value)
    return found


def _parsed(kind: str, request: ProtoMessage | Undecodable) -> Any:
    if isinstance(request, Undecodable):
        raise InvalidRequest(request.message)
    params = params_of(request)
    tenant = params.pop("tenant", "")
    if tenant:
        raise InvalidParams(
            "this agent's card declares no tenant: call without one", field="tenant"
        )
    return parse(kind, params)


def streamed(item: tuple[int, dict[str, Any]], version: str) -> ProtoMessage | Status:
    """One stream item as the response to send in `version`'s messages, or
    the status that ends the stream (an item numbered 0 is the stream's end
    by an error)."""
    seq, payload = item
    if not seq:
        return rich_status(payload["error"])
    return _numbered(seq, message_of(payload, STREAM_RESPONSES[version]))


def _numbered(seq: int, response: ProtoMessage) -> ProtoMessage:
    """`response` with its event's number in the event's metadata, to resume
    after (set on the message, so the conversion before it stays the same for
    every subscriber and can be remembered)."""
    field = response.WhichOneof("payload")
    if field is not None:
        getattr(response, field).metadata[EVENT_ID_FIELD] = str(seq)
    return response


def _abort(context: Any, status: tuple[grpc.StatusCode, str, bytes]) -> NoReturn:
    code, message, details = status
    context.set_trailing_metadata(((DETAILS_KEY, details),))
    context.abort(code, message)
    raise AssertionError("grpc's abort returns only by raising")


class Observed:
    """The request id bound to the call's log lines, and a server span.

    A class, not a `@contextmanager` generator: every call enters one, and a
    generator costs several times as much to set up and close."""

    __slots__ = ("_binding", "_span")

    def __init__(self, name: str, metadata: Mapping[str, str]) -> None:
        request_id = accepted_request_id(metadata.get(_REQUEST_ID_KEY))
        self._span = serving("POST", f"/{SERVICE}/{name}", metadata.items())
        self._binding = bind(request=request_id)

    def __enter__(self) -> None:
        self._span.__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            self._span.__exit__(*exc)
        finally:
            self._binding.release()


def record(name: str, outcome: str, started: float, events: int | None = None) -> None:
    elapsed = time.monotonic() - started
    requests_counted(name, outcome).inc()
    latency_of(name).observe(elapsed)
    shown = "" if events is None else f" events={events}"
    log.info("grpc %s outcome=%s%s duration_ms=%.1f", name, outcome, shown, elapsed * 1000)


def _unary_rpc(name: str, kind: str, replies: Replies) -> Callable[..., Any]:
    def rpc(self: A2AGrpcService, request: Any, context: Any) -> ProtoMessage:
        return self._unary(name, kind, request, context, replies)

    rpc.__name__ = name
    return rpc


def _streaming_rpc(name: str, kind: str) -> Callable[..., Any]:
    def rpc(self: A2AGrpcService, request: Any, context: Any) -> Iterator[Any]:
        return self._stream(name, kind, request, context)

    rpc.__name__ = name
    return rpc


# grpcio looks each RPC up by name on the servicer.
for _name, (_kind, _replies_of) in UNARY.items():
    setattr(A2AGrpcService, _name, _unary_rpc(_name, _kind, _replies_of))
for _name, _kind in STREAMING.items():
    setattr(A2AGrpcService, _name, _streaming_rpc(_name, _kind))
