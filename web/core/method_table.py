"""The A2A methods, once: what each binding calls every method.

Each method has a kind (`SEND`, `GET`, ...), the one name the handler
(`web.core.handler`) knows it by. Its row in `METHOD_TABLE` gives the rest:
its A2A 1.0 name (JSON-RPC's PascalCase spelling, the gRPC RPC, and the
name logs and metrics give it), JSON-RPC's A2A 0.3 spelling, its
HTTP+JSON route (verbs and path template, spec 1.0.1 §11.3), whether it
answers with a stream, and the protobuf message it answers with (each
event's, for a stream), by name, so nothing here imports grpc. JSON-RPC's
method names (`web.jsonrpc.binding`), the HTTP+JSON routes
(`web.rest.routes`) and the gRPC service's RPCs (`web.grpc.service`,
`web.grpc.aio`) are all read from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

SEND: Final = "send"
STREAM: Final = "stream"
GET: Final = "get"
CANCEL: Final = "cancel"
LIST: Final = "list"
SUBSCRIBE: Final = "subscribe"
PUSH_SET: Final = "push-set"
PUSH_GET: Final = "push-get"
PUSH_LIST: Final = "push-list"
PUSH_DELETE: Final = "push-delete"
CARD: Final = "card"


@dataclass(frozen=True)
class Method:
    """One method as every binding names it."""

    kind: str
    name: str  # A2A 1.0: JSON-RPC's PascalCase name and the gRPC RPC
    v03_name: str  # JSON-RPC's A2A 0.3 name
    verbs: tuple[str, ...]  # HTTP+JSON: the verbs its route serves it on
    path: str  # HTTP+JSON: its route's path template, variables in braces
    reply: str  # the protobuf message it answers with; a stream: each event's
    streams: bool = False

    @property
    def jsonrpc_names(self) -> tuple[str, str]:
        """Both JSON-RPC spellings: A2A 1.0's, then 0.3's."""
        return self.name, self.v03_name


_PUSH_CONFIGS: Final = "/tasks/{taskId}/pushNotificationConfigs"

METHOD_TABLE: Final[tuple[Method, ...]] = (
    Method(SEND, "SendMessage", "message/send", ("POST",), "/message:send", "SendMessageResponse"),
    Method(
        STREAM,
        "SendStreamingMessage",
        "message/stream",
        ("POST",),
        "/message:stream",
        "StreamResponse",
        streams=True,
    ),
    Method(GET, "GetTask", "tasks/get", ("GET",), "/tasks/{id}", "Task"),
    Method(CANCEL, "CancelTask", "tasks/cancel", ("POST",), "/tasks/{id}:cancel", "Task"),
    Method(LIST, "ListTasks", "tasks/list", ("GET",), "/tasks", "ListTasksResponse"),
    # GET in the proto, POST in the spec's table: both are served, as the
    # official SDK serves them.
    Method(
        SUBSCRIBE,
        "SubscribeToTask",
        "tasks/resubscribe",
        ("GET", "POST"),
        "/tasks/{id}:subscribe",
        "StreamResponse",
        streams=True,
    ),
    Method(
        PUSH_SET,
        "CreateTaskPushNotificationConfig",
        "tasks/pushNotificationConfig/set",
        ("POST",),
        _PUSH_CONFIGS,
        "TaskPushNotificationConfig",
    ),
    Method(
        PUSH_GET,
        "GetTaskPushNotificationConfig",
        "tasks/pushNotificationConfig/get",
        ("GET",),
        _PUSH_CONFIGS + "/{id}",
        "TaskPushNotificationConfig",
    ),
    Method(
        PUSH_LIST,
        "ListTaskPushNotificationConfigs",
        "tasks/pushNotificationConfig/list",
        ("GET",),
        _PUSH_CONFIGS,
        "ListTaskPushNotificationConfigsResponse",
    ),
    Method(
        PUSH_DELETE,
        "DeleteTaskPushNotificationConfig",
        "tasks/pushNotificationConfig/delete",
        ("DELETE",),
        _PUSH_CONFIGS + "/{id}",
        "google.protobuf.Empty",
    ),
    Method(
        CARD,
        "GetExtendedAgentCard",
        "agent/getAuthenticatedExtendedCard",
        ("GET",),
        "/extendedAgentCard",
        "AgentCard",
    ),
)
BY_KIND: Final[Mapping[str, Method]] = {method.kind: method for method in METHOD_TABLE}
