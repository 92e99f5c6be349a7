"""The gRPC binding's wire: protobuf messages to and from the 1.0 (and 1.1
draft) JSON shapes the handler already speaks, and errors as gRPC statuses.

A request message becomes the params a JSON-RPC call of the same method
carries (`google.protobuf.json_format`, camelCase names: ProtoJSON is the
1.0 JSON binding's own shape), so the handler's parsers (`web.core.handler`)
check it exactly as they check JSON-RPC and HTTP+JSON. A result goes back
the same road, as the message the method table names (`message_class`), in
the caller's version: the SDK's compiled 1.0 messages, or the 1.1 draft's
(`web.grpc.draft11`), which also decode every request.

An error is the google.rpc.Status that HTTP+JSON sends as JSON
(`web.core.errors.status_body`), with its gRPC code from the same table's code
name and its details (ErrorInfo, BadRequest, RetryInfo) packed as `Any`s in the
`grpc-status-details-bin` trailer, as spec 1.0.1 §10 and the official
clients expect.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Final, TypeVar

import grpc
from a2a.types import a2a_pb2
from google.protobuf import descriptor_pool, json_format
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.message_factory import GetMessageClass
from google.rpc import error_details_pb2, status_pb2

from shared.codec import encode_bytes
from shared.dialects import V10, V11
from web.grpc import draft11

P = TypeVar("P", bound=ProtoMessage)

DETAILS_KEY: Final = "grpc-status-details-bin"
# ErrorInfo, BadRequest and RetryInfo must be in the descriptor pool for ParseDict to pack them.
_DETAIL_TYPES: Final = (
    error_details_pb2.ErrorInfo,
    error_details_pb2.BadRequest,
    error_details_pb2.RetryInfo,
)
_CODES: Final = {code.name: code for code in grpc.StatusCode}
_CACHED_UP_TO: Final = 16 * 1024  # bytes of JSON: at most 1024 x 16 KiB remembered


class Undecodable:
    """Request bytes protobuf could not read: handed to the RPC in place of
    its message, so the call is refused with the binding's own error (grpcio
    would answer INTERNAL, or grpc.aio UNKNOWN, and log a traceback)."""

    def __init__(self, kind: str, error: DecodeError) -> None:
        self.message = f"the request is not a valid {kind} message: {str(error)[:200]}"


def add_service(servicer: object, server: Any) -> None:
    """The A2AService's RPCs on `servicer`, added to `server` (either grpcio
    server) as the generated registration adds them (the same names,
    messages and kinds, read from the service's descriptor; registered, so
    grpcio finds each without a lookup by name), but with requests decoded
    as the 1.1 draft's messages (a superset of 1.0's), requests that do not
    decode passed on as `Undecodable`, and replies of either version's
    messages serialized."""
    service = draft11.SERVICE
    table = {}
    for method in service.methods:
        make = (
            grpc.unary_stream_rpc_method_handler
            if method.server_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        table[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=_lenient(GetMessageClass(method.input_type)),
            response_serializer=_serialize,
        )
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, table),)
    )
    server.add_registered_method_handlers(service.full_name, table)


def _serialize(message: ProtoMessage) -> bytes:
    serialized: bytes = message.SerializeToString()
    return serialized


def _lenient(kind: type[ProtoMessage]) -> Any:
    def decode(data: bytes) -> ProtoMessage | Undecodable:
        try:
            return kind.FromString(data)
        except DecodeError as error:
            return Undecodable(kind.DESCRIPTOR.name, error)

    return decode


def message_class(name: str, version: str = V10) -> type[ProtoMessage]:
    """The protobuf message a method's row of `web.core.method_table` names,
    in `version` (V10 or V11): a message of the A2A package ("Task"), or one
    by its full name ("google.protobuf.Empty")."""
    full_name = name if "." in name else f"{a2a_pb2.DESCRIPTOR.package}.{name}"
    if version == V11:
        return draft11.message_class(full_name)
    kind: type[ProtoMessage] = GetMessageClass(
        descriptor_pool.Default().FindMessageTypeByName(full_name)
    )
    return kind


def params_of(request: ProtoMessage) -> dict[str, Any]:
    """A request message as JSON params (camelCase; unset fields left out)."""
    params: dict[str, Any] = json_format.MessageToDict(request)
    return params


def message_of(payload: Mapping[str, Any], kind: type[P], *, remember: bool = True) -> P:
    """A 1.0 JSON result as the protobuf message `kind`. Fields protobuf does
    not know (none are expected) are dropped rather than failing the call.

    `json_format.ParseDict` is pure Python (for a small task it costs more
    than the rest of a GetTask), so the conversion of a small payload
    is remembered by its JSON bytes: a task polled while it does not change,
    or one event sent to many subscribers, is parsed once. A result that is
    new each time (`remember=False`: a send's new task) is parsed straight
    away: remembering it would cost its encoding, a decoding and a copy, and
    push out results that are asked for again."""
    if not remember:
        return _parsed(payload, kind)
    encoded = encode_bytes(payload)
    if len(encoded) > _CACHED_UP_TO:
        return _parsed(payload, kind)
    message: P = kind.FromString(_serialized(encoded, kind))  # type: ignore[arg-type]
    return message


def _parsed(payload: Mapping[str, Any], kind: type[P]) -> P:
    message: P = json_format.ParseDict(payload, kind(), ignore_unknown_fields=True)
    return message


@lru_cache(maxsize=1024)
def _serialized(encoded: bytes, kind: type[ProtoMessage]) -> bytes:
    serialized: bytes = _parsed(json.loads(encoded), kind).SerializeToString()
    return serialized


def rich_status(error: Mapping[str, Any]) -> tuple[grpc.StatusCode, str, bytes]:
    """An HTTP+JSON error body's `error` (google.rpc.Status as JSON): the gRPC
    code, the message, and the serialized Status for the details trailer."""
    code = _CODES.get(str(error.get("status")), grpc.StatusCode.INTERNAL)
    message = str(error.get("message", ""))
    status = status_pb2.Status(code=code.value[0], message=message)
    for detail in error.get("details", ()):
        json_format.ParseDict(detail, status.details.add())
    return code, message, status.SerializeToString()
