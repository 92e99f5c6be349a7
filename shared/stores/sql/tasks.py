"""The task log in SQL: a task's row, its events and its status history,
written and read inside a transaction the store begins, in the shared form
(`shared.stores.sql.dialects`).

tasks     id, doc (the task as JSON, as of event `base`), seq (its last
          event), state, ts (its status time), owner, context, mkey
          (unique: one task per message key), expires, lineage (1: its
          next write starts a new lineage: numbers handed out may have
          been lost with the transactions that handed them out)
events    (task_id, seq) -> one JSON event: the log, and the tail after
          `base` that a read folds over `doc`
history   (task_id, seq) -> (ts, state): status changes, for listings
contexts  context -> owner
times     named times: the latest moment a listing read as of (`listed`)
          among them

A write reads the listing moment (locked shared, where the database locks
rows) and the task's row (locked) first, since the compare needs them; the
rest is sent without reading anything back. The
tables and the counts a listing totals (kept by triggers) are the
database's own (SQLite's `shared.stores.sqlite.tables`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol, cast

from shared.codec import decode, encode
from shared.contexts import waits_for_context
from shared.errors import ContextTaken
from shared.events import Event, StatusUpdate, context_of, current_status, fold
from shared.generation import stamped, withdrawn
from shared.store.contract import Created, Outcome, Record
from shared.store.listing import WINDOW, restamped
from shared.stores.sql.indexes import place_in
from shared.stores.sql.runner import Transaction
from shared.task import Task, epoch, is_terminal, state_of
from shared.transitions import SNAPSHOT_EVERY

ALIVE: Final = "(expires IS NULL OR expires > :now)"
# A task's row and the events after its `base`, in one statement (so as of
# one moment): one row per event of the tail, or one with no event.
_READ: Final = (
    "SELECT t.id, t.doc, t.seq, e.body FROM tasks t LEFT JOIN events e"
    " ON e.task_id = t.id AND e.seq > t.base"
    " WHERE t.id IDS AND (t.expires IS NULL OR t.expires > :now) ORDER BY t.id, e.seq"
)
_EVENTS: Final = (
    "SELECT e.seq, e.body FROM events e JOIN tasks t ON t.id = e.task_id"
    " WHERE e.task_id = :id AND e.seq > :after AND (t.expires IS NULL OR t.expires > :now)"
    " ORDER BY e.seq LIMIT :limit"
)
# The listing moment is the first lock a write takes: a write that asked for
# it while holding a row another write waits for could wait behind a listing
# raising the moment, which waits for that other write.
_MOMENT: Final = "SELECT at FROM times WHERE name = 'listed' {for_share}"
_ROW: Final = "SELECT seq, base, lineage, expires FROM tasks WHERE id = :id {for_update}"
_NEW: Final = (
    "INSERT INTO tasks (id, doc, seq, base, state, ts, owner, context, expires)"
    " VALUES (:id, :doc, :seq, :seq, :state, :ts, :owner, :context, :expires)"
)
_WHOLE: Final = (
    "UPDATE tasks SET doc = :doc, seq = :seq, base = :seq, state = :state, ts = :ts,"
    " expires = :expires, lineage = 0 WHERE id = :id"
)
_MOVED: Final = (
    "UPDATE tasks SET seq = :seq, state = :state, ts = :ts, expires = :expires WHERE id = :id"
)
_EVENT: Final = "INSERT INTO events (task_id, seq, body) VALUES (:id, :seq, :body)"
_CHANGE: Final = "INSERT INTO history (task_id, seq, ts, state) VALUES (:id, :seq, :ts, :state)"
_TRIM: Final = "DELETE FROM events WHERE task_id = :id AND seq <= :upto"
# The last change before the listing window is where the task stood when it began.
_FORGET_HISTORY: Final = (
    "DELETE FROM history WHERE task_id = :id AND seq < (SELECT max(seq) FROM history"
    " WHERE task_id = :id AND ts < :since)"
)
_RAISE: Final = (
    "INSERT INTO times (name, at) VALUES ('listed', :at)"
    " ON CONFLICT (name) DO UPDATE SET at = {greatest}(times.at, excluded.at)"
)
_PURGE: Final = (
    "SELECT id, context, owner FROM tasks WHERE expires <= :now ORDER BY expires LIMIT :n"
)


class Copy(Protocol):
    """A copy of each task a store keeps beside its tables (the file store's
    task files), written in the transactions that write the task whole."""

    def written(self, t: Transaction, task: Task) -> None: ...

    def differs(self, t: Transaction, task_id: str) -> bool:
        """Whether the copy is not the one last written (the next write then
        writes the task whole)."""

    def forgotten(self, t: Transaction, task_ids: list[str]) -> None: ...


class TaskLog:
    """The task log's statements; every method runs inside the transaction
    `t` the store began. `scores(state)` is where a task in `state` belongs
    in the time indexes (`shared.store.time_indexes`)."""

    def __init__(
        self,
        ttl: float,
        log_limit: int,
        scores: Callable[[str], Mapping[str, float | None]],
        copy: Copy | None = None,
    ) -> None:
        self._ttl = ttl
        self._log_limit = log_limit
        self._scores = scores
        self._copy = copy

    def write(
        self,
        t: Transaction,
        now: float,
        task: Task,
        events: Sequence[Event],
        expected: int | None,
        snapshot: bool,
    ) -> Record | None:
        """`events` appended to the task if its last event is still `expected`
        (None: whatever it is, or a new task), the task written whole when
        `snapshot`; the task as it then stands, or None."""
        task_id = task["id"]
        moment, row = t.firsts((_MOMENT, {}), (_ROW, {"id": task_id}))
        if row is not None and row[3] is not None and row[3] <= now:
            forget(t, [task_id])  # finished and past its time: gone, and written afresh
            row = None
        if expected is not None and (row is None or row[0] != expected):
            return None
        saved, task = restamped(events, task, moment[0] if moment else 0.0)
        seq, base = (int(row[0]), int(row[1])) if row else (0, 0)
        copy = self._copy
        snapshot = snapshot or (row is not None and copy is not None and copy.differs(t, task_id))
        if row is not None and row[2]:
            # A new lineage: numbers the lost transactions may have handed out are never reused.
            seq = max(seq, int(now * 1_000_000))
            task, saved = withdrawn(task, saved)
            snapshot = True  # nothing before the new base to fold the task from
        logged, changes = [], []
        for event in saved:
            seq += 1
            logged.append({"id": task_id, "seq": seq, "body": encode(event)})
            if event["kind"] == "status-update":
                status = event["status"]
                ts = epoch(status.get("timestamp", ""))
                changes.append({"id": task_id, "seq": seq, "ts": ts, "state": status["state"]})
        # One statement each (a write appends one or two events; `executemany`
        # costs more than that many statements).
        for params in logged:
            t.send(_EVENT, params)
        for params in changes:
            t.send(_CHANGE, params)
        state = state_of(task)
        columns = {
            "id": task_id,
            "seq": seq,
            "state": state,
            "ts": epoch(task["status"].get("timestamp", "")),
            "expires": now + self._ttl if self._ttl and is_terminal(state) else None,
        }
        if row is None or snapshot:
            whole = {**columns, "doc": encode(task)}
            if row is None:
                key = t.dialect.key
                owner, context = key(task.get("owner", "")), key(context_of(task))
                t.send(_NEW, {**whole, "owner": owner, "context": context})
            else:
                t.send(_WHOLE, whole)
            base = seq
            if copy is not None:
                copy.written(t, task)
        else:
            t.send(_MOVED, columns)
        trimmed = min(base, seq - self._log_limit)  # events numbered up to this go
        if trimmed > 0:
            t.send(_TRIM, {"id": task_id, "upto": trimmed})
        if changes:
            t.send(_FORGET_HISTORY, {"id": task_id, "since": now - WINDOW})
            place_in(t, task_id, self._scores(state))
        return Record(task, seq, seq - base)

    def create(
        self,
        t: Transaction,
        now: float,
        task: Task,
        message_key: str | None,
        supersedes: str | None,
    ) -> Record | Created:
        """The task made, unless its message key names a task still kept
        (that task, not made) or its context is another owner's
        (`ContextTaken`). A key whose task is gone or `supersedes` is let go."""
        task_id, context_id = task["id"], task["contextId"]
        owner, context = t.dialect.key(task.get("owner", "")), t.dialect.key(context_id)
        earlier_key = None
        if message_key is not None:
            row = t.one("SELECT id FROM tasks WHERE mkey = :key", {"key": message_key})
            if row is not None:
                earlier = read_one(t, row[0], now) if row[0] != supersedes else None
                if earlier is not None:
                    return Created(earlier.task, False)
                earlier_key = message_key
        t.send(
            "INSERT INTO contexts (context, owner) VALUES (:context, :owner)"
            " ON CONFLICT (context) DO NOTHING",
            {"context": context, "owner": owner},
        )
        taken = t.one("SELECT owner FROM contexts WHERE context = :context", {"context": context})
        if taken[0] != owner:
            raise ContextTaken(f"context {context_id} belongs to another caller")
        record = self.write(t, now, task, [current_status(task)], None, True)
        assert record is not None, "a write that compares nothing is made"
        if earlier_key is not None:
            # After the write, whose first lock is the listing moment's.
            t.send("UPDATE tasks SET mkey = NULL WHERE mkey = :key", {"key": earlier_key})
        t.send("UPDATE tasks SET mkey = :key WHERE id = :id", {"key": message_key, "id": task_id})
        return record

    def claim(
        self, t: Transaction, now: float, task_id: str, from_state: str, event: StatusUpdate
    ) -> Record | Outcome | None:
        """`event` appended if the task is in `from_state` (its context id and
        generation filled from the task); else the task as it stands, unclaimed;
        None for a task that waits for its context (the caller's to claim)."""
        found = read_one(t, task_id, now)
        if found is None or state_of(found.task) != from_state:
            return Outcome(False, found)
        if waits_for_context(found.task):
            return None
        filled: StatusUpdate = {**event, "contextId": found.task.get("contextId", "")}
        (filled,) = stamped(found.task, [filled])
        snapshot = found.tail + 1 >= SNAPSHOT_EVERY
        made = self.write(t, now, fold(found.task, [filled]), [filled], found.seq, snapshot)
        # Another write came first (where writes are not one at a time): not claimed.
        return made if made is not None else Outcome(False, read_one(t, task_id, now))

    def purge(self, t: Transaction, now: float, batch: int) -> int:
        """Finished tasks past their time, with their logs, histories, message
        keys (on the row), copies and contexts no other task uses; up to
        `batch` a run."""
        gone = t.rows(_PURGE, {"now": now, "n": batch})
        task_ids = [str(task_id) for task_id, _, _ in gone]
        forget(t, task_ids)
        if self._copy is not None:
            self._copy.forgotten(t, task_ids)
        t.each(
            "DELETE FROM contexts WHERE context = :context AND owner = :owner AND NOT EXISTS"
            " (SELECT 1 FROM tasks WHERE context = :context AND owner = :owner)",
            [{"context": context, "owner": owner} for _, context, owner in gone],
        )
        return len(gone)


def forget(t: Transaction, task_ids: list[str]) -> None:
    """The tasks gone, with their logs and histories."""
    ids = [{"id": task_id} for task_id in task_ids]
    for table, column in (("tasks", "id"), ("events", "task_id"), ("history", "task_id")):
        t.each(f"DELETE FROM {table} WHERE {column} = :id", ids)


def read_one(t: Transaction, task_id: str, now: float) -> Record | None:
    return read_many(t, [task_id], now).get(task_id)


def read_many(t: Transaction, task_ids: list[str], now: float) -> dict[str, Record]:
    """The tasks of `task_ids` still kept, each folded from its row; an
    unreadable one is left out."""
    if not task_ids:
        return {}
    names = ", ".join(f":id{number}" for number in range(len(task_ids)))
    params: dict[str, object] = {f"id{number}": task_id for number, task_id in enumerate(task_ids)}
    return records_of(t.rows(_READ.replace("IDS", f"IN ({names})"), {**params, "now": now}))


def read_all(t: Transaction, now: float) -> dict[str, Record]:
    """Every task still kept."""
    ids = f"IN (SELECT id FROM tasks WHERE {ALIVE})"
    return records_of(t.rows(_READ.replace("IDS", ids), {"now": now}))


def events(
    t: Transaction, task_id: str, after: int, now: float, limit: int | None
) -> list[tuple[int, Event]]:
    """The task's events numbered after `after`, while the task is kept; the
    log ends at an unreadable one."""
    unlimited = t.dialect.unlimited
    params = {
        "id": task_id,
        "after": after,
        "now": now,
        "limit": unlimited if limit is None else limit,
    }
    found: list[tuple[int, Event]] = []
    for seq, body in t.rows(_EVENTS, params):
        try:
            found.append((int(seq), decode(body)))
        except ValueError:
            break
    return found


def listed_as_of(t: Transaction, as_of: float) -> None:
    """The listing moment raised to `as_of` (never lowered)."""
    t.send(_RAISE, {"at": as_of})


def records_of(rows: list[Any]) -> dict[str, Record]:
    """Records from rows of (id, doc, seq, event body or None), ordered by id."""
    found: dict[str, tuple[str, int, list[str]]] = {}
    for task_id, doc, seq, body in rows:
        entry = found.setdefault(task_id, (doc, int(seq), []))
        if body is not None:
            entry[2].append(body)
    records: dict[str, Record] = {}
    for task_id, (doc, seq, tail) in found.items():
        try:
            task = decode(doc)
            logged = [decode(body) for body in tail]
        except ValueError:
            continue
        if isinstance(task, dict):
            records[task_id] = Record(fold(cast(Task, task), logged), seq, len(logged))
    return records
