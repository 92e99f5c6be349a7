"""A task as the tables hold it: snapshot, last event number, events after it."""

from __future__ import annotations

from typing import Any, cast

from shared.codec import decode
from shared.events import fold
from shared.store.contract import Record
from shared.task import Task

# The events after the snapshot of the row `t`, one JSON a line ('' when
# none): the `tail` function's body, written into each query that reads a
# task rather than called. A call of a SQL function that cannot be inlined
# (an aggregate over a table) parses and plans its body again on every
# execution of the query around it, and its `SET search_path` saves and
# restores a setting per row; as a subquery it is planned once, with the
# prepared statement.
TAIL = (
    "(SELECT coalesce(string_agg(e.body, E'\\n' ORDER BY e.seq), '')"
    " FROM events e WHERE e.task_id = t.id AND e.seq > t.base)"
)


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
