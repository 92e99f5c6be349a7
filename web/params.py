"""Check each method's params and turn them into typed values.

Anything missing or of the wrong type raises `InvalidParams` naming the
field, so the peer gets -32602 with a message that says what to fix.
Inbound messages come out in the stored shape (see `web.dialects`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared.task import Message
from web.dialects import stored_message_fields, stored_part, stored_role, stored_state
from web.errors import InvalidParams

MAX_PAGE_SIZE: Final = 100
DEFAULT_PAGE_SIZE: Final = 50


@dataclass(frozen=True)
class SendParams:
    message: Message
    task_id: str | None
    context_id: str | None
    blocking: bool | None  # None: the dialect's default
    history_length: int | None


@dataclass(frozen=True)
class TaskQuery:
    task_id: str
    history_length: int | None


@dataclass(frozen=True)
class ListQuery:
    context_id: str | None
    state: str | None
    page_size: int
    page_token: str
    history_length: int | None
    updated_after: str | None
    include_artifacts: bool


def send_params(params: object) -> SendParams:
    body = _object(params, "params")
    message = _object(body.get("message"), "message")
    configuration = _object(body.get("configuration", {}), "configuration")
    stored = {
        "kind": "message",
        "role": _role(message.get("role")),
        "messageId": _text(message.get("messageId"), "message.messageId"),
        "parts": _parts(message.get("parts")),
        **stored_message_fields(message),
    }
    return SendParams(
        message=stored,
        task_id=_optional_text(message.get("taskId"), "message.taskId"),
        context_id=_optional_text(message.get("contextId"), "message.contextId"),
        blocking=_blocking(configuration),
        history_length=_history_length(configuration, "configuration.historyLength"),
    )


def task_query(params: object) -> TaskQuery:
    body = _object(params, "params")
    return TaskQuery(_text(body.get("id"), "id"), _history_length(body, "historyLength"))


def task_id(params: object) -> str:
    return _text(_object(params, "params").get("id"), "id")


def list_query(params: object) -> ListQuery:
    body = _object(params if params is not None else {}, "params")
    state = None
    if body.get("status") not in (None, "", "TASK_STATE_UNSPECIFIED"):
        state = stored_state(body["status"])
        if state is None:
            raise InvalidParams(f"unknown task state {body['status']!r}", field="status")
    page_size = _optional_int(body.get("pageSize"), "pageSize")
    if page_size is None:
        page_size = DEFAULT_PAGE_SIZE
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise InvalidParams(f"pageSize must be 1 to {MAX_PAGE_SIZE}", field="pageSize")
    include = body.get("includeArtifacts", False)
    if not isinstance(include, bool):
        raise InvalidParams("includeArtifacts must be a boolean", field="includeArtifacts")
    return ListQuery(
        context_id=_optional_text(body.get("contextId"), "contextId"),
        state=state,
        page_size=page_size,
        page_token=_optional_text(body.get("pageToken"), "pageToken") or "",
        history_length=_history_length(body, "historyLength"),
        updated_after=_optional_text(body.get("statusTimestampAfter"), "statusTimestampAfter"),
        include_artifacts=include,
    )


def _role(role: object) -> str:
    if role is None:
        raise InvalidParams("message.role is required", field="message.role")
    if stored_role(role) != "user":
        raise InvalidParams(
            f"message.role must be 'user' or 'ROLE_USER', got {_shown(role)}", field="message.role"
        )
    return "user"


def _parts(parts: object) -> list[dict[str, Any]]:
    if not isinstance(parts, list) or not parts:
        raise InvalidParams("message.parts must be a non-empty list", field="message.parts")
    stored = []
    for index, part in enumerate(parts):
        where = f"message.parts[{index}]"
        if not isinstance(part, Mapping):
            raise InvalidParams(f"{where} must be an object", field=where)
        converted = stored_part(part)
        if converted is None:
            raise InvalidParams(f"{where} has no text, file or data", field=where)
        if converted["kind"] == "text" and not isinstance(converted["text"], str):
            raise InvalidParams(f"{where}.text must be a string", field=f"{where}.text")
        if converted["kind"] == "file" and not _has_file_content(converted["file"]):
            raise InvalidParams(f"{where} needs a string uri/url or bytes/raw", field=where)
        stored.append(converted)
    return stored


def _has_file_content(file: Mapping[str, Any]) -> bool:
    return isinstance(file.get("uri"), str) or isinstance(file.get("bytes"), str)


def _blocking(configuration: Mapping[str, Any]) -> bool | None:
    if "returnImmediately" in configuration:
        value = configuration["returnImmediately"]
        if not isinstance(value, bool):
            raise InvalidParams(
                "configuration.returnImmediately must be a boolean",
                field="configuration.returnImmediately",
            )
        return not value
    if configuration.get("blocking") is not None:
        value = configuration["blocking"]
        if not isinstance(value, bool):
            raise InvalidParams(
                "configuration.blocking must be a boolean", field="configuration.blocking"
            )
        return value
    return None


def _history_length(body: Mapping[str, Any], field: str) -> int | None:
    value = _optional_int(body.get(field.rpartition(".")[2]), field)
    if value is not None and value < 0:
        raise InvalidParams(f"{field} must not be negative", field=field)
    return value


def _object(value: object, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidParams(f"{field} must be an object", field=field)
    return value


def _text(value: object, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"{field} must be a non-empty string", field=field)
    return value


def _optional_text(value: object, field: str) -> str | None:
    # 1.0 clients serialise from protobuf, where "" means "not set".
    return None if value is None or value == "" else _text(value, field)


def _optional_int(value: object, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParams(f"{field} must be an integer", field=field)
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
