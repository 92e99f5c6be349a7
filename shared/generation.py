"""A task's generation (A2A 1.1, §3.2.7): one more for every status or artifact update.

A new task starts at 1. Every status update and every artifact update a
change appends carries the task's generation after it, one more than the
one before; a message added to the history is no such mutation and carries
none. A status update counts even when the state stays (a progress
message): it is an emitted TaskStatusUpdateEvent, and two events of one
task must never carry the same generation.

The writer of a change stamps its events from the task it read
(`shared.transitions`), and the store's compare-and-append saves them in
one step with the task they fold into, so two writers never stamp one
generation: the loser's append is refused and it stamps again from what
the winner wrote.

0 means unknown, and stays 0: a task saved before generations were kept,
or one whose store may have lost writes numbered after its last (a Redis
restarted on a lost second of its AOF, a file store past a power cut). The
generations those writes took may already have been seen with other
content, and a generation cannot jump as event numbers do, so such a task
says it has none (the spec's own signal to fall back) rather than repeat one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar, cast

# A task or an event: this module sits below `shared.events`, which folds with it.
Item = TypeVar("Item", bound=Mapping[str, Any])

FIELD: Final = "generation"
FIRST: Final = 1
UNKNOWN: Final = 0
_COUNTED: Final = frozenset({"status-update", "artifact-update"})


def generation_of(item: Mapping[str, Any]) -> int:
    """The generation a task or an event carries; UNKNOWN when it has none."""
    value = item.get(FIELD)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return UNKNOWN


def counts(event: Mapping[str, Any]) -> bool:
    return event.get("kind") in _COUNTED


def stamped(task: Mapping[str, Any], events: Sequence[Item]) -> list[Item]:
    """`events` with the generation each leaves the task at, counted on
    from `task`'s (an unknown generation stays unknown)."""
    generation = generation_of(task)
    out: list[Item] = []
    for event in events:
        if counts(event):
            if generation != UNKNOWN:
                generation += 1
            event = cast(Item, {**event, FIELD: generation})
        out.append(event)
    return out


Task_ = TypeVar("Task_", bound=Mapping[str, Any])


def withdrawn(task: Task_, events: Sequence[Item]) -> tuple[Task_, list[Item]]:
    """`task` and `events` with the generation unknown from now on."""
    marked = [cast(Item, {**event, FIELD: UNKNOWN}) if counts(event) else event for event in events]
    return cast(Task_, {**task, FIELD: UNKNOWN}), marked


def wire(generation: int) -> str:
    """A generation on the JSON wire: ProtoJSON writes an int64 as a decimal string."""
    return str(generation)


def parsed(value: object) -> int | None:
    """A generation a client sent (ProtoJSON's string or a JSON number); None
    when it is not a non-negative integer."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        return int(value)
    return None
