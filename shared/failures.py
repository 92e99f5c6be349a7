"""Why a task failed, kept in a form that can be grouped, and where the
newest failures are found.

Each place that fails a task names its cause once, as a small record in the
task's run record (`shared.attempts`: a private field, never shown to a
peer, so the wire is unchanged): `{"failure": {"cause": ..., "type": ...}}`.
The status message still says it in words; this is the same reason as data.

| cause | where the task fails |
|---|---|
| `worker-lost` | the reaper: its worker stopped heartbeating, no attempt left |
| `timed-out` | the run passed TOOLNEXUS_TIME_LIMIT |
| `exception` | the agent raised; `type` is the exception's class name |
| `bad-result` | the agent returned or yielded something that cannot be saved |
| `retries-used` | the agent asked for another attempt (`Retry`) with none left |
| `input-timeout` | the reaper: nobody answered an `input-required` task in time |
| `agent-unavailable` | the worker could not load the agent |
| `unrecorded` | failed by a version that recorded no cause (its words are all there is) |

A broker that is down fails no task: the send is refused with the task's id,
the task stays `submitted`, and beat sends it once the broker is back.

The newest failures across every owner are kept in a scored index of the
store's (`shared.indexes`), `failed`, scored by minus the time of the
failure so that its first members are the newest; `failed-at` holds the same
members scored by the time itself, so that the oldest can be found and
forgotten once their tasks are gone. A member is the task's id and its
group (`Entry`), so the groups are counted without reading the tasks. Both
are written in one step right after each failing write (`indexed`), by the
worker that failed the task.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from shared.attempts import FIELD as RUN
from shared.errors import StoreError
from shared.indexes import Indexes
from shared.mappings import is_mapping
from shared.task import FAILED, Task, epoch, message_text, state_of

log = logging.getLogger(__name__)

KEY: Final = "failure"  # in the run record
WORKER_LOST: Final = "worker-lost"
TIMED_OUT: Final = "timed-out"
EXCEPTION: Final = "exception"
BAD_RESULT: Final = "bad-result"
RETRIES_USED: Final = "retries-used"
INPUT_TIMEOUT: Final = "input-timeout"
AGENT_UNAVAILABLE: Final = "agent-unavailable"
UNRECORDED: Final = "unrecorded"
CAUSES: Final = (
    WORKER_LOST,
    TIMED_OUT,
    EXCEPTION,
    BAD_RESULT,
    RETRIES_USED,
    INPUT_TIMEOUT,
    AGENT_UNAVAILABLE,
    UNRECORDED,
)

NEWEST: Final = "failed"
OLDEST: Final = "failed-at"


@dataclass(frozen=True)
class Failure:
    """A failure's cause and, for an exception, its class name."""

    cause: str
    type: str = ""

    @property
    def group(self) -> str:
        """The name its group goes by: the cause, with the exception's type."""
        return f"{self.cause}: {self.type}" if self.type else self.cause

    @classmethod
    def named(cls, group: str) -> Failure:
        """The failure a group's name stands for (`group` read back)."""
        cause, _, kind = group.partition(": ")
        return cls(cause, kind) if cause in CAUSES else cls(UNRECORDED)


def run_change(failure: Failure) -> dict[str, Any]:
    """What a failing status update sets in the task's run record."""
    record: dict[str, str] = {"cause": failure.cause}
    if failure.type:
        record["type"] = failure.type
    return {KEY: record}


def failure_of(task: Mapping[str, Any]) -> Failure:
    """The cause a failed task carries (`unrecorded` where it has none)."""
    run = task.get(RUN)
    record = run.get(KEY) if is_mapping(run) else None
    if not is_mapping(record) or record.get("cause") not in CAUSES:
        return Failure(UNRECORDED)
    kind = record.get("type")
    return Failure(record["cause"], kind if isinstance(kind, str) else "")


@dataclass(frozen=True)
class Entry:
    """One failure in the index: the task's id and its group, kept together
    as the index's member (`member`), so that a look counts the groups from
    the index alone and reads only the tasks it shows."""

    task_id: str
    group: str

    @property
    def member(self) -> str:
        return f"{self.task_id} {self.group}"  # a task id holds no space

    @classmethod
    def of(cls, member: str) -> Entry:
        task_id, _, group = member.partition(" ")
        return cls(task_id, group or UNRECORDED)


def indexed(indexes: Indexes | None, task: Task | None) -> None:
    """Put a task that just failed in the index of the newest failures
    (`indexes`: the store's, `shared.store.wiring.Abilities`; None where it
    keeps none). The failure is saved whatever happens here: an index the
    store cannot write now is logged, and the task is still in its owner's
    list."""
    if indexes is None or task is None or state_of(task) != FAILED:
        return
    moment = epoch(task["status"].get("timestamp", ""))
    member = Entry(task["id"], failure_of(task).group).member
    try:
        indexes.place(member, {NEWEST: -moment, OLDEST: moment})
    except StoreError as error:
        log.warning("task %s: not in the index of failures: %s", task["id"], error)


def newest(indexes: Indexes, window: int) -> list[Entry]:
    """The newest `window` failures, newest first."""
    return [Entry.of(member) for member, _ in indexes.range(NEWEST, math.inf, window)]


def forget(indexes: Indexes, entries: Iterable[Entry]) -> None:
    """Failures of tasks gone from the store (expired, purged) leave both indexes."""
    members = [entry.member for entry in entries]
    if members:
        indexes.remove(NEWEST, *members)
        indexes.remove(OLDEST, *members)


def forget_gone(indexes: Indexes, read: Callable[[str], object], batch: int = 100) -> int:
    """Beat's upkeep: the oldest failures whose tasks are gone (expired,
    purged; `read` gives None) leave the indexes, up to the first whose task
    is still there; how many left. Tasks expire in the order they finished,
    so once the oldest is there the rest are: a run with nothing to forget
    costs one range read and one task read."""
    gone = []
    for member, _ in indexes.range(OLDEST, math.inf, batch):
        entry = Entry.of(member)
        if read(entry.task_id) is not None:
            break
        gone.append(entry)
    forget(indexes, gone)
    return len(gone)


def reason_text(task: Mapping[str, Any]) -> str:
    """The failure's words: the task's status message."""
    status = task.get("status")
    message = status.get("message") if is_mapping(status) else None
    return message_text(message) if is_mapping(message) else ""
