"""Every fault a peer can hear about, mapped to its JSON-RPC wire form here and only here.

The faults raised deeper down come from `shared.errors`; the ones only the
HTTP edge can detect (a body that is not JSON, a bad envelope, bad params,
an unknown method or version, a missing token) are the `RequestError`
subclasses below, still rooted in the one `ToolnexusError` hierarchy.
`describe` turns any exception into a `WireError`; `error_body` renders it
in the shape the request's dialect expects (A2A 1.0 adds typed `data`).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any, Final

from shared.errors import (
    BrokerError,
    ContextTaken,
    InvalidTaskId,
    InvalidTransition,
    StoreError,
    TaskNotCancelable,
    TaskNotFound,
    ToolnexusError,
)

log = logging.getLogger(__name__)

ERROR_INFO: Final = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST: Final = "type.googleapis.com/google.rpc.BadRequest"
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
    the HTTP status and any context worth returning (e.g. the task id)."""

    code: int
    message: str
    reason: str
    domain: str = A2A_DOMAIN
    http_status: int = 200
    field: str | None = None
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)


# (class, code, reason, HTTP status); the first matching class wins, so
# subclasses come before their bases.
_TABLE: Final[tuple[tuple[type[Exception], int, str, int], ...]] = (
    (ParseError, -32700, "PARSE_ERROR", 200),
    (BodyTooLarge, -32600, "REQUEST_TOO_LARGE", 413),
    (BodyIncomplete, -32600, "REQUEST_INCOMPLETE", 400),
    (HostNotAllowed, -32600, "HOST_NOT_ALLOWED", 400),
    (OriginNotAllowed, -32600, "ORIGIN_NOT_ALLOWED", 403),
    (InvalidRequest, -32600, "INVALID_REQUEST", 200),
    (MethodNotFound, -32601, "METHOD_NOT_FOUND", 200),
    (InvalidParams, -32602, "INVALID_PARAMS", 200),
    (InvalidTaskId, -32602, "INVALID_PARAMS", 200),
    (ContextTaken, -32602, "INVALID_PARAMS", 200),
    (TaskNotFound, -32001, "TASK_NOT_FOUND", 200),
    (TaskNotCancelable, -32002, "TASK_NOT_CANCELABLE", 200),
    (PushNotSupported, -32003, "PUSH_NOTIFICATION_NOT_SUPPORTED", 200),
    (UnsupportedOperation, -32004, "UNSUPPORTED_OPERATION", 200),
    (InvalidTransition, -32004, "UNSUPPORTED_OPERATION", 200),
    (ContentTypeNotSupported, -32005, "CONTENT_TYPE_NOT_SUPPORTED", 200),
    (ExtendedCardNotConfigured, -32007, "EXTENDED_AGENT_CARD_NOT_CONFIGURED", 200),
    (VersionNotSupported, -32009, "VERSION_NOT_SUPPORTED", 200),
    (Unauthorized, -32000, "UNAUTHENTICATED", 401),
    (AuthUnavailable, -32603, "AUTH_UNAVAILABLE", 503),
)


def describe(error: BaseException, *, task_id: str | None = None) -> WireError:
    """The wire form of `error`. Infrastructure faults get a fixed message
    (details go to the log, never to the peer); anything unexpected becomes
    -32603 with no trace of the code that failed."""
    if isinstance(error, TaskError):
        return describe(error.cause, task_id=error.task_id)
    metadata = {"taskId": task_id} if task_id else {}
    for kind, code, reason, status in _TABLE:
        if isinstance(error, kind):
            where = getattr(error, "field", None)
            return WireError(
                code, str(error), reason, http_status=status, field=where, metadata=metadata
            )
    if isinstance(error, StoreError):
        log.warning("store fault: %s", error)
        return WireError(
            -32603, STORE_UNAVAILABLE, "STORE_UNAVAILABLE", OWN_DOMAIN, metadata=metadata
        )
    if isinstance(error, BrokerError):
        log.warning("broker fault: %s", error)
        return WireError(
            -32603, BROKER_UNAVAILABLE, "BROKER_UNAVAILABLE", OWN_DOMAIN, metadata=metadata
        )
    log.error("internal error", exc_info=error)
    return WireError(-32603, "internal error", "INTERNAL_ERROR", metadata=metadata)


def error_body(wire: WireError, request_id: object, *, typed_data: bool) -> dict[str, Any]:
    """A JSON-RPC error response. `typed_data` (A2A 1.0) adds the spec's
    `data` array: a google.rpc.ErrorInfo, plus a BadRequest for -32602."""
    error: dict[str, Any] = {"code": wire.code, "message": wire.message}
    if typed_data:
        data: list[dict[str, Any]] = [
            {
                "@type": ERROR_INFO,
                "reason": wire.reason,
                "domain": wire.domain,
                "metadata": wire.metadata,
            }
        ]
        if wire.field is not None:
            violation = {"field": wire.field, "description": wire.message}
            data.append({"@type": BAD_REQUEST, "fieldViolations": [violation]})
        error["data"] = data
    elif wire.metadata or wire.field is not None:
        plain: dict[str, Any] = dict(wire.metadata)
        if wire.field is not None:
            plain["field"] = wire.field
        error["data"] = plain
    return {"jsonrpc": "2.0", "id": request_id, "error": error}
