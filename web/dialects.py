"""The wire shapes, for the bindings: they live in `shared.dialects`, where
push delivery (a worker) shapes the same StreamResponses a stream sends."""

from shared.dialects import (
    V03,
    V10,
    artifact_for,
    event_for,
    message_for,
    part_v03,
    part_v10,
    state_v10,
    status_for,
    stored_part,
    stored_role,
    stored_state,
    stream_response,
    task_for,
    webhook_for,
)

__all__ = [
    "V03",
    "V10",
    "artifact_for",
    "event_for",
    "message_for",
    "part_v03",
    "part_v10",
    "state_v10",
    "status_for",
    "stored_part",
    "stored_role",
    "stored_state",
    "stream_response",
    "task_for",
    "webhook_for",
]
