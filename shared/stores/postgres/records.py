"""A task as the tables hold it: snapshot, last event number, events after it."""

from __future__ import annotations

from typing import Any, cast

from shared.codec import decode
from shared.events import fold
from shared.store import Record
from shared.task import Task


def record_of(doc: Any, seq: Any, tail: Any) -> Record | None:
    """The task folded from its row (None: absent or unreadable)."""
    if doc is None or seq is None:
        return None
    try:
        events = [decode(line) for line in (tail or "").splitlines()]
        task = decode(doc)
    except ValueError:
        return None
    if not isinstance(task, dict):
        return None
    return Record(fold(cast(Task, task), events), int(seq), len(events))
