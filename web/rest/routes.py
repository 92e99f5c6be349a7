"""The HTTP+JSON routes of A2A 1.0: which method a verb and a path name.

From spec 1.0.1 §11.3 and `specification/a2a.proto`'s http options. The
subscribe route is GET in the proto and POST in the spec's table: both are
served, as the official SDK serves them. Every route may also be called
under a `/{tenant}/` prefix (the proto's additional bindings); this agent
declares no tenant in its card, so a prefixed call is refused by name
(see `web.rest.binding`), never served as if the prefix were not there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from shared.quoting import shown
from web.core.errors import RouteNotFound, VerbNotAllowed
from web.core.tasks import (
    CANCEL,
    CARD,
    GET,
    LIST,
    PUSH_DELETE,
    PUSH_GET,
    PUSH_LIST,
    PUSH_SET,
    SEND,
    STREAM,
    SUBSCRIBE,
)

PUSH_CONFIGS: Final = "pushNotificationConfigs"
_MESSAGE_ROUTES: Final = {"message:send": SEND, "message:stream": STREAM}
_CARD_ROUTE: Final = "extendedAgentCard"
# The push-config routes serve one method per verb.
_PUSH_BY_VERB: Final = {
    ("TaskPushNotificationConfigs", "GET"): (PUSH_LIST, "ListTaskPushNotificationConfigs"),
    ("TaskPushNotificationConfigs", "POST"): (PUSH_SET, "CreateTaskPushNotificationConfig"),
    ("TaskPushNotificationConfig", "GET"): (PUSH_GET, "GetTaskPushNotificationConfig"),
    ("TaskPushNotificationConfig", "DELETE"): (PUSH_DELETE, "DeleteTaskPushNotificationConfig"),
}
_TASK_ACTIONS: Final = {
    ":cancel": (CANCEL, "CancelTask", ("POST",)),
    ":subscribe": (SUBSCRIBE, "SubscribeToTask", ("GET", "POST")),
}


@dataclass(frozen=True)
class Route:
    """One route: the method it runs and what its path holds."""

    kind: str  # a method kind of `web.core.tasks` (SEND, GET, ...)
    name: str  # the A2A method, for logs and metrics
    template: str  # the path with its variables named, for metrics
    verbs: tuple[str, ...]
    path_params: dict[str, str] = field(default_factory=dict)
    tenant: str | None = None


def _is_root(segment: str) -> bool:
    return segment == "tasks" or segment in _MESSAGE_ROUTES or segment == _CARD_ROUTE


# First path segments that other rooms of the front end serve (the console's
# pages at /console/tasks/<id> would otherwise read as a tenant "console"), so
# they are never taken for a tenant prefix.
NOT_TENANTS: Final = frozenset({"console"})


def is_rest_path(path: str) -> bool:
    """Whether `path` is one this binding answers (its routes, with or without
    a tenant prefix), so the front routes it here rather than to Flask."""
    first, _, rest = path[1:].partition("/")
    if _is_root(first) or first.startswith("tasks:"):
        return True
    if first in NOT_TENANTS:
        return False
    return bool(rest) and _is_root(rest.partition("/")[0])


def match(verb: str, path: str) -> Route:
    """The route `verb path` names; RouteNotFound or VerbNotAllowed if none."""
    segments = path[1:].split("/")
    tenant = None
    if not _is_root(segments[0]) and len(segments) > 1:
        tenant, segments = segments[0], segments[1:]
    route = _route(segments)
    if route is None:
        raise RouteNotFound(f"no HTTP+JSON route at {shown(path, 200)}")
    if verb not in route.verbs:
        raise VerbNotAllowed(
            f"{shown(verb, 10)} is not served at {route.template}: use {' or '.join(route.verbs)}",
            allowed=route.verbs,
        )
    kind, name = _PUSH_BY_VERB.get((route.name, verb), (route.kind, route.name))
    if tenant is None and kind == route.kind:
        return route
    return Route(kind, name, route.template, route.verbs, route.path_params, tenant)


def _route(segments: list[str]) -> Route | None:
    head, count = segments[0], len(segments)
    if count == 1:
        if head in _MESSAGE_ROUTES:
            kind = _MESSAGE_ROUTES[head]
            name = "SendMessage" if kind == SEND else "SendStreamingMessage"
            return Route(kind, name, "/" + head, ("POST",))
        if head == "tasks":
            return Route(LIST, "ListTasks", "/tasks", ("GET",))
        if head == _CARD_ROUTE:
            return Route(CARD, "GetExtendedAgentCard", "/" + _CARD_ROUTE, ("GET",))
        return None
    if head != "tasks":
        return None
    task = segments[1]
    if count == 2:
        for suffix, (kind, name, verbs) in _TASK_ACTIONS.items():
            if task.endswith(suffix):
                ids = {"id": task.removesuffix(suffix)}
                return Route(kind, name, "/tasks/{id}" + suffix, verbs, ids)
        return Route(GET, "GetTask", "/tasks/{id}", ("GET",), {"id": task})
    if segments[2] != PUSH_CONFIGS or count > 4:
        return None
    if count == 3:
        template = f"/tasks/{{taskId}}/{PUSH_CONFIGS}"
        ids = {"taskId": task}
        return Route(PUSH_LIST, "TaskPushNotificationConfigs", template, ("GET", "POST"), ids)
    template = f"/tasks/{{taskId}}/{PUSH_CONFIGS}/{{id}}"
    params = {"taskId": task, "id": segments[3]}
    return Route(PUSH_GET, "TaskPushNotificationConfig", template, ("GET", "DELETE"), params)
