"""Check each method's params and turn them into typed values.

Anything missing or of the wrong type raises `InvalidParams` naming the
field, so the peer gets -32602 with a message that says what to fix. Every
field of a message that is stored is checked against the A2A shapes first,
so no client can store what another client's SDK cannot parse. Inbound
messages come out in the stored shape (see `shared.dialects`).

Names are read in either spelling ProtoJSON allows (`historyLength` or
`history_length`); values under `metadata` and `data` are the peer's own
and are never renamed.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from shared.dialects import stored_part, stored_role, stored_state
from shared.generation import parsed as parsed_generation
from shared.mappings import is_mapping
from shared.owners.turns import PRIORITY_KEY, priority_problem
from shared.quoting import shown
from shared.store.contract import is_safe_id
from shared.task import PART_KINDS, Message, Part
from web.core.errors import InvalidParams
from web.core.media import part_media_type

MAX_PAGE_SIZE: Final = 100
DEFAULT_PAGE_SIZE: Final = 50
MAX_ID_LENGTH: Final = 1024  # messageId, contextId: a client's own ids, bounded
# How deep a client's own JSON (a data part, metadata) may nest. Protobuf
# parsers (the a2a-sdk's 1.0 types) stop at 100 messages, and each level of
# a JSON value costs two (Value, then Struct or ListValue): a task holding
# data 48 levels deep does not parse as a Task in a ListTasks reply,
# breaking every other client's listing. 32 leaves room for the wrappers.
MAX_VALUE_DEPTH: Final = 32
_OPAQUE: Final = frozenset({"metadata", "data"})


@dataclass(frozen=True)
class SendParams:
    message: Message
    task_id: str | None
    context_id: str | None
    blocking: bool | None  # None: the dialect's default
    history_length: int | None
    media_types: tuple[str, ...] = ()  # of each part, as the peer declared it
    webhook: WebhookParams | None = None  # a push config given with the send
    version: str = "1.0"  # the wire version it came in (its webhook gets that shape)
    # A2A 1.1: a follow-up is refused unless the task is at this generation
    if_generation_match: int | None = None


@dataclass(frozen=True)
class TaskQuery:
    task_id: str
    history_length: int | None
    # A2A 1.1: answer once the task's generation is past this (None: at once)
    current_generation: int | None = None


@dataclass(frozen=True)
class ListQuery:
    context_id: str | None
    state: str | None
    page_size: int
    page_token: str
    history_length: int | None
    updated_after: str | None
    include_artifacts: bool


def camel_case(value: Any) -> Any:
    """Params with every snake_case name in lowerCamelCase (ProtoJSON's other
    spelling), leaving the peer's own `metadata` and `data` values alone."""
    if isinstance(value, list):
        return [camel_case(item) for item in value]
    if not isinstance(value, dict):
        return value
    renamed: dict[str, Any] = {}
    for key, item in value.items():
        name = camel_name(key) if "_" in key else key
        if name not in _OPAQUE and isinstance(item, (dict, list)):
            item = camel_case(item)
        renamed.setdefault(name, item)
    return renamed


def camel_name(name: str) -> str:
    """`history_length` -> `historyLength`."""
    head, *rest = name.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def send_params(params: object) -> SendParams:
    body = _object(params, "params")
    message = _object(body.get("message"), "message")
    configuration = _object(body.get("configuration") or {}, "configuration")
    stored: Message = {
        "kind": "message",
        "role": _role(message.get("role")),
        "messageId": _text(message.get("messageId"), "message.messageId", MAX_ID_LENGTH),
        "parts": _parts(message.get("parts")),
    }
    if message.get("kind") not in (None, "message"):
        raise InvalidParams("message.kind must be 'message'", field="message.kind")
    task_id = _optional_task_id(message.get("taskId"), "message.taskId")
    context_id = _optional_text(message.get("contextId"), "message.contextId", MAX_ID_LENGTH)
    if "metadata" in message:
        stored["metadata"] = dict(_value(message["metadata"], "message.metadata", object_only=True))
        if problem := priority_problem(stored):
            field = f"message.metadata.{PRIORITY_KEY}"
            raise InvalidParams(f"{field} {problem}", field=field)
    if "extensions" in message:
        stored["extensions"] = _strings(message["extensions"], "message.extensions")
    if "referenceTaskIds" in message:
        stored["referenceTaskIds"] = _strings(
            message["referenceTaskIds"], "message.referenceTaskIds"
        )
    if "metadata" in body:
        _object(body["metadata"], "metadata")
    return SendParams(
        message=stored,
        task_id=task_id,
        context_id=context_id,
        blocking=_blocking(configuration),
        history_length=_history_length(configuration, "configuration.historyLength"),
        media_types=tuple(part_media_type(part) for part in message["parts"]),
        webhook=inline_webhook(configuration),
        if_generation_match=_generation(configuration, "configuration.ifGenerationMatch"),
    )


def task_query(params: object) -> TaskQuery:
    body = _object(params, "params")
    current = _generation(body, "currentGeneration")
    return TaskQuery(task_id(body), _history_length(body, "historyLength"), current)


def _generation(body: Mapping[str, Any], name: str) -> int | None:
    """An int64 generation (ProtoJSON: a decimal string or a number)."""
    value = body.get(name.rpartition(".")[2])
    if value is None:
        return None
    checked = parsed_generation(value)
    if checked is None:
        raise InvalidParams(
            f"{name} must be a non-negative integer, got {shown(value)}", field=name
        )
    return checked


def task_id(params: object) -> str:
    """The task `id` of GetTask, CancelTask and SubscribeToTask."""
    value = _object(params, "params").get("id")
    checked = _optional_task_id(value, "id")
    if checked is None:
        raise InvalidParams("id must be a non-empty string", field="id")
    return checked


def list_query(params: object) -> ListQuery:
    body = _object(params if params is not None else {}, "params")
    state = None
    if body.get("status") not in (None, "", "TASK_STATE_UNSPECIFIED"):
        state = stored_state(body["status"])
        if state is None:
            raise InvalidParams(f"unknown task state {shown(body['status'])}", field="status")
    page_size = _optional_int(body.get("pageSize"), "pageSize")
    if page_size is None:
        page_size = DEFAULT_PAGE_SIZE
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise InvalidParams(f"pageSize must be 1 to {MAX_PAGE_SIZE}", field="pageSize")
    include = body.get("includeArtifacts", False)
    if include is None:
        include = False
    if not isinstance(include, bool):
        raise InvalidParams("includeArtifacts must be a boolean", field="includeArtifacts")
    return ListQuery(
        context_id=_optional_text(body.get("contextId"), "contextId", MAX_ID_LENGTH),
        state=state,
        page_size=page_size,
        page_token=_optional_text(body.get("pageToken"), "pageToken", 4096) or "",
        history_length=_history_length(body, "historyLength"),
        updated_after=_optional_text(body.get("statusTimestampAfter"), "statusTimestampAfter"),
        include_artifacts=include,
    )


def _role(role: object) -> Literal["user"]:
    if role is None:
        raise InvalidParams("message.role is required", field="message.role")
    if stored_role(role) != "user":
        raise InvalidParams(
            f"message.role must be 'user' or 'ROLE_USER', got {shown(role, 40)}",
            field="message.role",
        )
    return "user"


def _parts(parts: object) -> list[Part]:
    if not isinstance(parts, list) or not parts:
        raise InvalidParams("message.parts must be a non-empty list", field="message.parts")
    stored = []
    for index, part in enumerate(parts):
        where = f"message.parts[{index}]"
        if not is_mapping(part):
            raise InvalidParams(f"{where} must be an object", field=where)
        converted = stored_part(part)
        if converted is None:
            kind = part.get("kind")
            problem = (
                f"is of unknown kind {shown(kind, 40)}: expected text, file or data"
                if kind is not None and (not isinstance(kind, str) or kind not in PART_KINDS)
                else "has no text, file or data"
            )
            raise InvalidParams(f"{where} {problem}", field=where)
        _check_part(converted, part, where)
        stored.append(converted)
    return stored


def _check_part(part: Part, sent: Mapping[str, Any], where: str) -> None:
    if "metadata" in sent:
        _value(sent["metadata"], f"{where}.metadata", object_only=True)
    if part["kind"] == "data":
        _value(part["data"], f"{where}.data")
    for name in ("filename", "mediaType"):
        if name in sent:
            _text(sent[name], f"{where}.{name}", 1024)
    if part["kind"] == "text" and not isinstance(part["text"], str):
        raise InvalidParams(f"{where}.text must be a string", field=f"{where}.text")
    if part["kind"] == "file":
        file: Mapping[str, Any] = part["file"]
        if not is_mapping(file):
            raise InvalidParams(f"{where}.file must be an object", field=f"{where}.file")
        for name in ("name", "mimeType", "uri", "bytes"):
            if name in file and not isinstance(file[name], str):
                raise InvalidParams(f"{where} {name} must be a string", field=f"{where}.{name}")
        if ("uri" in file) == ("bytes" in file):
            raise InvalidParams(f"{where} needs a string uri/url or bytes/raw", field=where)
        if "bytes" in file and not _is_base64(file["bytes"]):
            raise InvalidParams(f"{where} bytes/raw must be base64", field=f"{where}.raw")


def _is_base64(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _blocking(configuration: Mapping[str, Any]) -> bool | None:
    if configuration.get("returnImmediately") is not None:
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
    if not is_mapping(value):
        raise InvalidParams(f"{field} must be an object", field=field)
    return value


def _value(value: object, field: str, *, object_only: bool = False) -> Any:
    """A client's own JSON, nested at most MAX_VALUE_DEPTH levels."""
    if object_only:
        _object(value, field)
    pending: list[tuple[object, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, Mapping):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= MAX_VALUE_DEPTH:
            raise InvalidParams(
                f"{field} is nested deeper than {MAX_VALUE_DEPTH} levels", field=field
            )
        pending.extend((child, depth + 1) for child in children)
    return value


def _text(value: object, field: str, limit: int = 256) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidParams(f"{field} must be a non-empty string", field=field)
    if len(value) > limit:
        raise InvalidParams(f"{field} is longer than {limit} characters", field=field)
    return value


def _optional_text(value: object, field: str, limit: int = 256) -> str | None:
    # 1.0 clients serialise from protobuf, where "" means "not set".
    return None if value is None or value == "" else _text(value, field, limit)


def _optional_task_id(value: object, field: str) -> str | None:
    """A task id is one this server could have made: anything else names no task."""
    text = _optional_text(value, field, MAX_ID_LENGTH)
    if text is not None and not is_safe_id(text):
        raise InvalidParams(f"{field} {shown(text)} is not a task id", field=field)
    return text


def _strings(value: object, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidParams(f"{field} must be a list of strings", field=field)
    return list(value)


def _optional_int(value: object, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParams(f"{field} must be an integer", field=field)
    return value


# --- push notification configs -------------------------------------------------

MAX_URL_LENGTH: Final = 2048
MAX_SECRET_LENGTH: Final = 4096


@dataclass(frozen=True)
class WebhookParams:
    """A webhook as given, before it is tied to a task: `config_id` None
    means the task's id (the official SDK's default)."""

    config_id: str | None
    url: str
    token: str | None
    scheme: str | None
    credentials: str | None


@dataclass(frozen=True)
class PushConfigParams:
    task_id: str
    webhook: WebhookParams


@dataclass(frozen=True)
class PushConfigQuery:
    task_id: str
    config_id: str | None  # None: the task's id (0.3's get without an id)
    page_size: int
    page_token: str


def push_config_params(params: object) -> PushConfigParams:
    """CreateTaskPushNotificationConfig (1.0: the TaskPushNotificationConfig
    itself) or tasks/pushNotificationConfig/set (0.3: taskId plus a nested
    pushNotificationConfig)."""
    body = _object(params, "params")
    task = _optional_task_id(body.get("taskId"), "taskId")
    if task is None:
        raise InvalidParams("taskId must be a non-empty string", field="taskId")
    if "pushNotificationConfig" in body:
        return PushConfigParams(
            task, webhook(body["pushNotificationConfig"], "pushNotificationConfig")
        )
    return PushConfigParams(task, webhook(body, ""))


def push_config_query(params: object) -> PushConfigQuery:
    """Get/List/Delete: 1.0 names the task `taskId` and the config `id`; 0.3
    names the task `id` and the config `pushNotificationConfigId`."""
    body = _object(params, "params")
    if body.get("taskId") not in (None, ""):
        task_field, config_field = "taskId", "id"
    else:
        task_field, config_field = "id", "pushNotificationConfigId"
    task = _optional_task_id(body.get(task_field), task_field)
    if task is None:
        raise InvalidParams(f"{task_field} must be a non-empty string", field=task_field)
    page_size = _optional_int(body.get("pageSize"), "pageSize") or MAX_PAGE_SIZE
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise InvalidParams(f"pageSize must be 1 to {MAX_PAGE_SIZE}", field="pageSize")
    return PushConfigQuery(
        task_id=task,
        config_id=_optional_text(body.get(config_field), config_field, MAX_ID_LENGTH),
        page_size=page_size,
        page_token=_optional_text(body.get("pageToken"), "pageToken", MAX_ID_LENGTH) or "",
    )


def inline_webhook(configuration: Mapping[str, Any]) -> WebhookParams | None:
    """A send's own webhook: 1.0 `taskPushNotificationConfig`, 0.3 `pushNotificationConfig`."""
    for name in ("taskPushNotificationConfig", "pushNotificationConfig"):
        if configuration.get(name) is not None:
            return webhook(configuration[name], f"configuration.{name}")
    return None


def webhook(value: object, where: str) -> WebhookParams:
    prefix = f"{where}." if where else ""
    body = _object(value, where or "params")
    url = _text(body.get("url"), f"{prefix}url", MAX_URL_LENGTH)
    scheme_part, _, rest = url.partition("://")
    if scheme_part.lower() not in ("http", "https") or not rest or _has_line_break(url):
        raise InvalidParams(f"{prefix}url must be an http or https URL", field=f"{prefix}url")
    token = _secret(body.get("token"), f"{prefix}token")
    scheme = credentials = None
    if body.get("authentication") is not None:
        auth = _object(body["authentication"], f"{prefix}authentication")
        found = auth.get("scheme")
        if found is None and isinstance(auth.get("schemes"), list) and auth["schemes"]:
            found = auth["schemes"][0]  # 0.3: a list of schemes; the first is used
        scheme = _secret(found, f"{prefix}authentication.scheme")
        if (
            scheme is None
            or not scheme.isascii()
            or not all(c.isalnum() or c in "-._~+" for c in scheme)
        ):
            raise InvalidParams(
                f"{prefix}authentication.scheme must be an HTTP auth scheme such as Bearer",
                field=f"{prefix}authentication.scheme",
            )
        credentials = _secret(auth.get("credentials"), f"{prefix}authentication.credentials")
    return WebhookParams(
        config_id=_optional_text(body.get("id"), f"{prefix}id", MAX_ID_LENGTH),
        url=url,
        token=token,
        scheme=scheme,
        credentials=credentials,
    )


def _has_line_break(text: str) -> bool:
    return any(char in text for char in "\r\n\x00")


def _secret(value: object, field: str) -> str | None:
    """A token or credentials: a header value, so never a line break (which
    would let it write headers of its own). Never echoed in the error."""
    text = _optional_text(value, field, MAX_SECRET_LENGTH)
    if text is not None and (_has_line_break(text) or not text.isprintable()):
        raise InvalidParams(f"{field} must not hold line breaks or control characters", field=field)
    return text
