"""Every fault a peer can hear about, mapped to its wire forms here and only here.

The faults raised deeper down come from `shared.errors`; the ones only a
binding can detect (a body that is not JSON, a bad envelope or route, bad
params, an unknown method or version, a missing token) are the
`RequestError` subclasses below, still rooted in the one `ToolnexusError`
hierarchy. `describe` turns any exception into a `WireError`, which holds
what each binding sends: `error_body` renders it as a JSON-RPC error in the
shape the request's dialect expects (A2A 1.0 adds typed `data`),
`status_body` as HTTP+JSON's google.rpc.Status, which the gRPC binding
sends as its status (`web.grpc.wire`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Any, Final

from shared.errors import (
    BrokerError,
    ContextBusy,
    ContextTaken,
    InvalidTaskId,
    InvalidTransition,
    OwnerLimitExceeded,
    StoreError,
    TaskNotCancelable,
    TaskNotFound,
    ToolnexusError,
)

log = logging.getLogger(__name__)

ERROR_INFO: Final = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST: Final = "type.googleapis.com/google.rpc.BadRequest"
RETRY_INFO: Final = "type.googleapis.com/google.rpc.RetryInfo"
A2A_DOMAIN: Final = "a2a-protocol.org"
OWN_DOMAIN: Final = "toolnexus-serve"

STORE_UNAVAILABLE: Final = "task store unavailable"
BROKER_UNAVAILABLE: Final = "broker unavailable"


class RequestError(ToolnexusError):
    """A fault in the request itself, found at the HTTP edge."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ParseError(RequestError):
    """The body is not JSON."""


class InvalidRequest(RequestError):
    """The body is JSON but not a JSON-RPC 2.0 request object."""


class BodyTooLarge(InvalidRequest):
    """The body is over the configured limit."""


class BodyIncomplete(InvalidRequest):
    """The client stopped sending before the body its Content-Length announced."""


class MethodNotFound(RequestError):
    """No such method in any dialect."""


class InvalidParams(RequestError):
    """Params missing or of the wrong type; `field` names which one."""


class UnsupportedOperation(RequestError):
    """Understood, but this server does not do it (e.g. ListTasks on a store without `all`)."""


class ContentTypeNotSupported(RequestError):
    """A body that is not JSON by its Content-Type, or message parts whose media
    types the agent does not accept."""


class BodyNotJson(ContentTypeNotSupported):
    """A request body whose Content-Type is not JSON. HTTP+JSON answers it 415
    (RFC 9110's Unsupported Media Type); the A2A error of §5.4 (400) is about
    the media types of message parts."""


class RouteNotFound(MethodNotFound):
    """HTTP+JSON: no route at this path."""


class VerbNotAllowed(MethodNotFound):
    """HTTP+JSON: a route that exists, asked with a verb it does not serve."""

    def __init__(self, message: str, *, allowed: tuple[str, ...]) -> None:
        super().__init__(message)
        self.allowed = allowed


class PushNotSupported(RequestError):
    """A push-notification config method: this server sends no push notifications."""


class ExtendedCardNotConfigured(RequestError):
    """GetExtendedAgentCard: there is no extended card."""


class VersionNotSupported(RequestError):
    """An `A2A-Version` header naming a version this server does not speak."""


class Unauthorized(RequestError):
    """`POST /` without a valid bearer token while tokens are configured."""


class AuthUnavailable(RequestError):
    """A bearer token could not be checked now (the issuer's key set is down)."""


class HostNotAllowed(InvalidRequest):
    """A `Host` this server does not answer to (DNS rebinding, a forged name)."""


class OriginNotAllowed(InvalidRequest):
    """A browser request from a page whose origin is not allowed."""


class TaskGenerationMismatch(ToolnexusError):
    """A2A 1.1: a follow-up's `ifGenerationMatch` is not the task's generation
    when the follow-up would be written (the spec's example's message and
    ErrorInfo metadata)."""

    def __init__(self, task_id: str, expected: int, current: int) -> None:
        super().__init__(
            f"Task generation mismatch: expected {expected} but current generation is {current}"
        )
        self.metadata = {
            "taskId": task_id,
            "expectedGeneration": str(expected),
            "currentGeneration": str(current),
        }


class TaskError(ToolnexusError):
    """`cause` happened to a task that was already saved; the peer hears the
    cause, plus the task id so it can read the task's recorded failure."""

    def __init__(self, cause: Exception, task_id: str) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.task_id = task_id


@dataclass(frozen=True)
class WireError:
    """What the peer is told: code, message, a reason for 1.0's ErrorInfo,
    the HTTP status of each binding (`http_status`: JSON-RPC's; `rest_status`
    and `status`, the google.rpc code name: HTTP+JSON's; `status` is also the
    gRPC binding's status code) and any context worth returning (e.g. the
    task id); `retry_after`, seconds, when the peer may try again then
    (JSON-RPC's `data.retryAfter`, a RetryInfo detail, HTTP+JSON's
    `Retry-After`)."""

    code: int
    message: str
    reason: str
    domain: str = A2A_DOMAIN
    http_status: int = 200
    field: str | None = None
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)
    rest_status: int = 500
    status: str = "INTERNAL"
    retry_after: float | None = None


# google.rpc code names: HTTP+JSON's `error.status`, and the gRPC binding's
# status code (`web.grpc.wire`), which are the same names by definition.
_INVALID: Final = "INVALID_ARGUMENT"
_PRECONDITION: Final = "FAILED_PRECONDITION"
_NOT_FOUND: Final = "NOT_FOUND"
_UNAVAILABLE: Final = "UNAVAILABLE"

# (class, JSON-RPC code, reason, JSON-RPC's HTTP status, HTTP+JSON's status
# and the code name, HTTP+JSON's and gRPC's; spec 1.0.1 §5.4 for the A2A
# errors); the first matching
# class wins, so subclasses come before their bases.
_TABLE: Final[tuple[tuple[type[Exception], int, str, int, int, str], ...]] = (
    (ParseError, -32700, "PARSE_ERROR", 200, 400, _INVALID),
    (BodyTooLarge, -32600, "REQUEST_TOO_LARGE", 413, 413, _INVALID),
    (BodyIncomplete, -32600, "REQUEST_INCOMPLETE", 400, 400, _INVALID),
    (HostNotAllowed, -32600, "HOST_NOT_ALLOWED", 400, 400, _INVALID),
    (OriginNotAllowed, -32600, "ORIGIN_NOT_ALLOWED", 403, 403, "PERMISSION_DENIED"),
    (InvalidRequest, -32600, "INVALID_REQUEST", 200, 400, _INVALID),
    (RouteNotFound, -32601, "ROUTE_NOT_FOUND", 404, 404, _NOT_FOUND),
    (VerbNotAllowed, -32601, "METHOD_NOT_ALLOWED", 405, 405, _INVALID),
    (MethodNotFound, -32601, "METHOD_NOT_FOUND", 200, 404, _NOT_FOUND),
    (InvalidParams, -32602, "INVALID_PARAMS", 200, 400, _INVALID),
    (InvalidTaskId, -32602, "INVALID_PARAMS", 200, 400, _INVALID),
    (ContextTaken, -32602, "INVALID_PARAMS", 200, 400, _INVALID),
    (TaskNotFound, -32001, "TASK_NOT_FOUND", 200, 404, _NOT_FOUND),
    (TaskNotCancelable, -32002, "TASK_NOT_CANCELABLE", 200, 400, _PRECONDITION),
    (PushNotSupported, -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED", 200, 400, _PRECONDITION),
    (UnsupportedOperation, -32004, "UNSUPPORTED_OPERATION", 200, 400, _PRECONDITION),
    (InvalidTransition, -32004, "UNSUPPORTED_OPERATION", 200, 400, _PRECONDITION),
    (BodyNotJson, -32005, "CONTENT_TYPE_NOT_SUPPORTED", 200, 415, _INVALID),
    (ContentTypeNotSupported, -32005, "CONTENT_TYPE_NOT_SUPPORTED", 200, 400, _INVALID),
    (
        ExtendedCardNotConfigured,
        -32007,
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
        200,
        400,
        _PRECONDITION,
    ),
    (VersionNotSupported, -32009, "VERSION_NOT_SUPPORTED", 200, 400, _PRECONDITION),
    (TaskGenerationMismatch, -32010, "TASK_GENERATION_MISMATCH", 200, 409, "ABORTED"),
    (ContextBusy, -32039, "CONTEXT_BUSY", 200, 409, "ABORTED"),
    (OwnerLimitExceeded, -32029, "OWNER_LIMIT_EXCEEDED", 200, 429, "RESOURCE_EXHAUSTED"),
    (Unauthorized, -32000, "UNAUTHENTICATED", 401, 401, "UNAUTHENTICATED"),
    (AuthUnavailable, -32603, "AUTH_UNAVAILABLE", 503, 503, _UNAVAILABLE),
)


# Reasons this service defines itself (their ErrorInfo's domain is its own):
# a send over its owner's limits (-32029: in JSON-RPC's range for server
# errors, clear of A2A's -32001..-32009 and this service's -32010; 29 for 429),
# a new task refused while its context is busy (-32039, as clear of them).
_OWN_REASONS: Final = frozenset({"OWNER_LIMIT_EXCEEDED", "CONTEXT_BUSY"})


def describe(error: BaseException, *, task_id: str | None = None) -> WireError:
    """The wire form of `error`. Infrastructure faults get a fixed message
    (details go to the log, never to the peer); anything unexpected becomes
    -32603 with no trace of the code that failed."""
    if isinstance(error, TaskError):
        return describe(error.cause, task_id=error.task_id)
    metadata = {"taskId": task_id} if task_id else {}
    for kind, code, reason, status, rest_status, rest_name in _TABLE:
        if isinstance(error, kind):
            where = getattr(error, "field", None)
            metadata.update(getattr(error, "metadata", {}))
            retry_after: float | None = getattr(error, "retry_after", None)
            if retry_after is not None:  # for readers of ErrorInfo alone (the a2a-sdk's errors)
                metadata["retryAfter"] = f"{retry_seconds(retry_after):.3f}".rstrip("0").rstrip(".")
            return WireError(
                code,
                str(error),
                reason,
                OWN_DOMAIN if reason in _OWN_REASONS else A2A_DOMAIN,
                http_status=status,
                field=where,
                metadata=metadata,
                rest_status=rest_status,
                status=rest_name,
                retry_after=retry_after,
            )
    if isinstance(error, StoreError | BrokerError):
        log.warning("%s fault: %s", "store" if isinstance(error, StoreError) else "broker", error)
        message, reason = (
            (STORE_UNAVAILABLE, "STORE_UNAVAILABLE")
            if isinstance(error, StoreError)
            else (BROKER_UNAVAILABLE, "BROKER_UNAVAILABLE")
        )
        return WireError(
            -32603,
            message,
            reason,
            OWN_DOMAIN,
            metadata=metadata,
            rest_status=503,
            status=_UNAVAILABLE,
        )
    log.error("internal error", exc_info=error)
    return WireError(-32603, "internal error", "INTERNAL_ERROR", metadata=metadata)


def error_body(wire: WireError, request_id: object, *, typed_data: bool) -> dict[str, Any]:
    """A JSON-RPC error response. `typed_data` (A2A 1.0) adds the spec's
    `data` array: a google.rpc.ErrorInfo, plus a BadRequest for -32602."""
    error: dict[str, Any] = {"code": wire.code, "message": wire.message}
    if typed_data:
        error["data"] = details(wire)
    elif wire.metadata or wire.field is not None or wire.retry_after is not None:
        plain: dict[str, Any] = dict(wire.metadata)
        if wire.field is not None:
            plain["field"] = wire.field
        if wire.retry_after is not None:
            plain["retryAfter"] = retry_seconds(wire.retry_after)
        error["data"] = plain
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def details(wire: WireError) -> list[dict[str, Any]]:
    """The typed details of an error (ProtoJSON `Any`s): a google.rpc.ErrorInfo,
    plus a BadRequest naming the field when one is at fault, and a RetryInfo
    when the peer may try again after a while."""
    found: list[dict[str, Any]] = [
        {
            "@type": ERROR_INFO,
            "reason": wire.reason,
            "domain": wire.domain,
            "metadata": wire.metadata,
        }
    ]
    if wire.field is not None:
        violation = {"field": wire.field, "description": wire.message}
        found.append({"@type": BAD_REQUEST, "fieldViolations": [violation]})
    if wire.retry_after is not None:
        found.append({"@type": RETRY_INFO, "retryDelay": f"{retry_seconds(wire.retry_after):.3f}s"})
    return found


def retry_seconds(seconds: float) -> float:
    """A retry hint as the wire gives it: to the millisecond, rounded up."""
    return max(0.001, math.ceil(seconds * 1000) / 1000)


def retry_after_header(seconds: float) -> str:
    """HTTP's `Retry-After`: whole seconds, rounded up, at least 1."""
    return str(max(1, math.ceil(seconds)))


def status_body(wire: WireError) -> dict[str, Any]:
    """An HTTP+JSON error (spec §11.6): the google.rpc.Status shape, its code
    the HTTP status."""
    return {
        "error": {
            "code": wire.rest_status,
            "status": wire.status,
            "message": wire.message,
            "details": details(wire),
        }
    }
