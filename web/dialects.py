"""Translation between the stored (A2A 0.3) shape and A2A 1.0 wire shapes.

The store only ever holds the 0.3-like shape of `shared.task`; this module
is the one place that knows 1.0 names: `TASK_STATE_*` states, `ROLE_*`
roles and parts without a `kind` tag (`text`, `url`/`raw`, `data`).
Inbound parts and roles are accepted in either form, so a 1.0 message sent
without a version header (or a 0.3 one with `A2A-Version: 1.0`) still works.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from shared.task import STATES, Message, Task

V03: Final = "0.3"
V10: Final = "1.0"

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


def stored_part(part: Mapping[str, Any]) -> dict[str, Any] | None:
    """A part in 0.3 (`kind`-tagged) or 1.0 form -> the stored 0.3 form,
    or None when it carries no content this server can keep."""
    extra = {"metadata": part["metadata"]} if isinstance(part.get("metadata"), dict) else {}
    kind = part.get("kind")
    if kind == "text" or (kind is None and "text" in part):
        return {"kind": "text", "text": part.get("text"), **extra}
    if kind == "data" or (kind is None and "data" in part):
        return {"kind": "data", "data": part.get("data"), **extra}
    if kind == "file" and isinstance(part.get("file"), dict):
        return {"kind": "file", "file": part["file"], **extra}
    if kind is None and ("url" in part or "raw" in part):
        file = {old: part[new] for old, new in _FILE_KEYS if part.get(new) is not None}
        return {"kind": "file", "file": file, **extra}
    return None


def part_v10(part: object) -> dict[str, Any]:
    if not isinstance(part, Mapping):
        return {}
    out: dict[str, Any] = {}
    kind = part.get("kind")
    if kind == "text":
        out["text"] = part.get("text", "")
    elif kind == "data":
        out["data"] = part.get("data")
    elif kind == "file" and isinstance(part.get("file"), Mapping):
        file = part["file"]
        out.update({new: file[old] for old, new in _FILE_KEYS if file.get(old) is not None})
    if isinstance(part.get("metadata"), Mapping):
        out["metadata"] = part["metadata"]
    return out


def message_v10(message: object) -> dict[str, Any]:
    if not isinstance(message, Mapping):
        return {}
    out = {key: value for key, value in message.items() if key not in ("kind", "role", "parts")}
    out["role"] = _ROLES_V10.get(str(message.get("role")), "ROLE_UNSPECIFIED")
    out["parts"] = [part_v10(part) for part in _items(message.get("parts"))]
    return out


def artifact_v10(artifact: object) -> dict[str, Any]:
    if not isinstance(artifact, Mapping):
        return {}
    out = {key: value for key, value in artifact.items() if key != "parts"}
    out["parts"] = [part_v10(part) for part in _items(artifact.get("parts"))]
    return out


def task_v10(task: Task) -> dict[str, Any]:
    """A stored task in A2A 1.0 shape (no `kind`, 1.0 states, roles and parts)."""
    out = {key: value for key, value in task.items() if key not in ("kind", "status")}
    raw_status = task.get("status")
    status: Mapping[str, Any] = raw_status if isinstance(raw_status, Mapping) else {}
    wire_status: dict[str, Any] = {"state": state_v10(status.get("state"))}
    if "message" in status:
        wire_status["message"] = message_v10(status["message"])
    if "timestamp" in status:
        wire_status["timestamp"] = status["timestamp"]
    out["status"] = wire_status
    if "history" in task:
        out["history"] = [message_v10(message) for message in _items(task["history"])]
    if "artifacts" in task:
        out["artifacts"] = [artifact_v10(artifact) for artifact in _items(task["artifacts"])]
    return out


def task_for(version: str, task: Task) -> dict[str, Any]:
    """The stored task as `version` shows it; 0.3 is the stored shape itself."""
    return task_v10(task) if version == V10 else task


def stored_message_fields(message: Mapping[str, Any]) -> Message:
    """The optional fields of an inbound message that the store keeps as they are."""
    keep = ("contextId", "taskId", "metadata", "extensions", "referenceTaskIds")
    return {key: message[key] for key in keep if key in message}


def _items(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
