"""Translation between the stored (A2A 0.3) shape and the wire shapes.

The store only ever holds the 0.3-like shape of `shared.task`; this module
is the one place that knows 1.0 names: `TASK_STATE_*` states, `ROLE_*`
roles, parts without a `kind` tag (`text`, `url`/`raw`, `data`) and stream
responses wrapped by kind (`statusUpdate`, `artifactUpdate`, ...).
Inbound parts and roles are accepted in either form, so a 1.0 message sent
without a version header (or a 0.3 one with `A2A-Version: 1.0`) still works.
Fields the service keeps for itself (a task's `owner`) never leave here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, cast

from shared.attempts import FIELD as RUN
from shared.contexts import FIELD as SAME_CONTEXT
from shared.events import Event
from shared.generation import FIELD as GENERATION
from shared.generation import generation_of, wire
from shared.mappings import is_mapping
from shared.task import REPEATS_RESULT, STATES, Part, Task

V03: Final = "0.3"
V10: Final = "1.0"
# A2A 1.1 (a draft): 1.0's shapes, and the generation on tasks and their
# updates (`shared.generation`); the rest of 1.1 sits with what it changes.
V11: Final = "1.1"
VERSIONS: Final = (V11, V10, V03)

_STATE_PREFIX: Final = "TASK_STATE_"
_ROLES_V10: Final = {"user": "ROLE_USER", "agent": "ROLE_AGENT"}
_ROLES_STORED: Final = {wire: stored for stored, wire in _ROLES_V10.items()}
# Keys a 0.3 file object and a 1.0 part spell differently.
_FILE_KEYS: Final = (
    ("uri", "url"),
    ("bytes", "raw"),
    ("mimeType", "mediaType"),
    ("name", "filename"),
)
_PRIVATE: Final = frozenset({"owner", RUN, SAME_CONTEXT})
_HIDDEN: Final = {
    V03: _PRIVATE | {GENERATION},
    V10: _PRIVATE | {GENERATION, "kind"},  # 1.0 tasks carry no `kind`
    V11: _PRIVATE | {"kind"},
}
# An event's fields no peer sees as they are stored.
_UNSHOWN: Final = frozenset({GENERATION, RUN})
# 1.0 stream responses: which wrapper each stored event kind goes in.
_STREAM_KEYS: Final = {
    "task": "task",
    "message": "message",
    "status-update": "statusUpdate",
    "artifact-update": "artifactUpdate",
}


def state_v10(state: object) -> str:
    """ "input-required" -> "TASK_STATE_INPUT_REQUIRED"."""
    if isinstance(state, str) and state in STATES:
        return _STATE_PREFIX + state.upper().replace("-", "_")
    return _STATE_PREFIX + "UNSPECIFIED"


def stored_state(state: object) -> str | None:
    """A state in either spelling -> the stored one, or None if it is none."""
    if not isinstance(state, str):
        return None
    if state.startswith(_STATE_PREFIX):
        state = state.removeprefix(_STATE_PREFIX).lower().replace("_", "-")
    return state if state in STATES else None


def stored_role(role: object) -> str | None:
    if not isinstance(role, str):
        return None
    if role in _ROLES_STORED:
        return _ROLES_STORED[role]
    return role if role in _ROLES_V10 else None


def stored_part(part: Mapping[str, Any]) -> Part | None:
    """A part in 0.3 (`kind`-tagged) or 1.0 form -> the stored 0.3 form,
    or None when it carries no content this server can keep."""
    extra = {"metadata": part["metadata"]} if "metadata" in part else {}
    kind = part.get("kind")
    stored: dict[str, Any] | None = None
    if kind == "text" or (kind is None and "text" in part):
        stored = {"kind": "text", "text": part.get("text"), **extra}
    elif kind == "data" or (kind is None and "data" in part):
        stored = {"kind": "data", "data": part.get("data"), **extra}
    elif kind == "file" and "file" in part:
        stored = {"kind": "file", "file": part["file"], **extra}
    elif kind is None and ("url" in part or "raw" in part):
        file = {old: part[new] for old, new in _FILE_KEYS if part.get(new) is not None}
        stored = {"kind": "file", "file": file, **extra}
    # Checked field by field by `web.core.params` before anything is stored.
    return cast(Part | None, stored)


def part_v10(part: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    kind = part.get("kind")
    if kind == "text":
        out["text"] = part.get("text", "")
    elif kind == "data":
        out["data"] = part.get("data")
    elif kind == "file" and is_mapping(part.get("file")):
        file = part["file"]
        out.update({new: file[old] for old, new in _FILE_KEYS if file.get(old) is not None})
    if is_mapping(part.get("metadata")):
        out["metadata"] = part["metadata"]
    return out


def part_v03(part: Mapping[str, Any]) -> Mapping[str, Any]:
    """0.3 data parts hold objects; any other JSON value is wrapped, marked as
    the official SDK marks it, so a 0.3 peer can still parse the part."""
    if part.get("kind") != "data" or is_mapping(part.get("data")):
        return part
    metadata = {**(part.get("metadata") or {}), "data_part_compat": True}
    return {"kind": "data", "data": {"value": part.get("data")}, "metadata": metadata}


def message_for(version: str, message: Mapping[str, Any]) -> dict[str, Any]:
    parts = [part for part in message.get("parts") or [] if is_mapping(part)]
    if version == V03:
        return {**message, "parts": [part_v03(part) for part in parts]}
    out = {key: value for key, value in message.items() if key not in ("kind", "role", "parts")}
    out["role"] = _ROLES_V10.get(str(message.get("role")), "ROLE_UNSPECIFIED")
    out["parts"] = [part_v10(part) for part in parts]
    return out


def artifact_for(version: str, artifact: Mapping[str, Any]) -> dict[str, Any]:
    parts = [part for part in artifact.get("parts") or [] if is_mapping(part)]
    shaped = part_v03 if version == V03 else part_v10
    return {**artifact, "parts": [shaped(part) for part in parts]}


def status_for(version: str, status: Mapping[str, Any]) -> dict[str, Any]:
    """A stored status as `version` shows it. A message that repeats the
    task's text result (`REPEATS_RESULT`) is shown to 0.3 peers, which have
    always read the answer there, and left out for 1.0 and later, whose peers
    read the result from the artifact and would otherwise show it twice."""
    state = status.get("state")
    out: dict[str, Any] = {"state": state if version == V03 else state_v10(state)}
    if "message" in status and (version == V03 or not status.get(REPEATS_RESULT)):
        out["message"] = message_for(version, status["message"])
    if "timestamp" in status:
        out["timestamp"] = status["timestamp"]
    return out


def task_for(version: str, task: Task) -> dict[str, Any]:
    """A stored task as `version` shows it (0.3 keeps `kind` and its states;
    1.1 alone shows the generation, 0 when the task keeps none)."""
    skipped = _HIDDEN.get(version, _HIDDEN[V03])
    out = {key: value for key, value in task.items() if key not in skipped}
    if version == V11:
        out[GENERATION] = wire(generation_of(task))
    status = task.get("status")
    out["status"] = status_for(version, status if is_mapping(status) else {})
    if "history" in task:
        out["history"] = [message_for(version, message) for message in _items(task["history"])]
    if "artifacts" in task:
        out["artifacts"] = [artifact_for(version, item) for item in _items(task["artifacts"])]
    return out


def event_for(version: str, event: Event) -> dict[str, Any]:
    """A stored event as a stream response: 1.0 wraps it by kind (and has no
    `kind` or `final`); 0.3 sends it as it is stored."""
    kind = event["kind"]
    if kind == "message":
        shaped = message_for(version, event)
    else:
        shaped = {key: value for key, value in event.items() if key not in _UNSHOWN}
        if kind == "status-update":
            shaped["status"] = status_for(version, event["status"])  # type: ignore[typeddict-item]
        else:
            shaped["artifact"] = artifact_for(version, event["artifact"])  # type: ignore[typeddict-item]
        if version == V11:
            shaped[GENERATION] = wire(generation_of(event))
    if version == V03:
        return shaped
    body = {key: value for key, value in shaped.items() if key not in ("kind", "final")}
    return {_STREAM_KEYS[kind]: body}


def _items(value: object) -> list[Any]:
    return [item for item in value if is_mapping(item)] if isinstance(value, list) else []


def stream_response(version: str, item: Event | Task) -> dict[str, Any]:
    """One StreamResponse: an event, or the task as it stands (1.0 wraps it)."""
    if item["kind"] != "task":
        return event_for(version, item)
    task = task_for(version, item)
    return task if version == V03 else {"task": task}


def webhook_for(version: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """A stored push config as `version` shows it: 1.0's flat
    TaskPushNotificationConfig, or 0.3's taskId plus pushNotificationConfig."""
    shown: dict[str, Any] = {"id": config["id"], "url": config["url"]}
    if "token" in config:
        shown["token"] = config["token"]
    auth = config.get("authentication")
    if version != V03:
        if auth is not None:
            shown["authentication"] = dict(auth)
        return {"taskId": config["taskId"], **shown}
    if auth is not None:
        shown["authentication"] = {"schemes": [auth["scheme"]], "credentials": auth["credentials"]}
    return {"taskId": config["taskId"], "pushNotificationConfig": shown}
