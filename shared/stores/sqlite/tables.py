"""The SQLite store's tables, and a task as they hold it.

tasks     id, doc (the task as JSON, as of event `base`), seq (its last
          event), state, ts (its status time), owner, context, mkey
          (unique: one task per message key), expires, lineage (1: its
          next write starts a new lineage: the machine went down since)
events    (task_id, seq) -> one JSON event: the log, and the tail after
          `base` that a read folds over `doc`
history   (task_id, seq) -> (ts, state): status changes, for listings
contexts  context -> owner
counts    (owner, context or '*', state or '*') -> how many tasks, kept by triggers
times     named times: the reaper's last run (`reaper`), the latest
          moment a listing read as of (`listed`), the boot of the machine
          that last opened it (`boot`)
documents small documents (`shared.stores.sql.documents`)
indexes   scored indexes (`shared.stores.sql.indexes`)
"""

from __future__ import annotations

from typing import Any, Final, cast

from shared.codec import decode
from shared.events import fold
from shared.store.contract import Record
from shared.task import Task

SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS tasks (id TEXT PRIMARY KEY, doc TEXT NOT NULL,"
    " seq INTEGER NOT NULL, base INTEGER NOT NULL, state TEXT NOT NULL, ts REAL NOT NULL,"
    " owner TEXT NOT NULL, context TEXT NOT NULL, mkey TEXT UNIQUE, expires REAL,"
    " lineage INTEGER NOT NULL DEFAULT 0)",
    # What a listing reads, whole in its index: a page and its count touch no task's row.
    "CREATE INDEX IF NOT EXISTS tasks_by_owner ON tasks (owner, ts, id, state, expires)",
    "CREATE INDEX IF NOT EXISTS tasks_by_context ON tasks (owner, context, ts, id, state, expires)",
    "CREATE INDEX IF NOT EXISTS tasks_expiring ON tasks (expires) WHERE expires IS NOT NULL",
    # How many tasks each owner has, in each context and state: a listing's
    # total without counting its tasks (`shared.stores.sqlite.listing`). Kept
    # by triggers, so every write of a row keeps it, whichever statement.
    "CREATE TABLE IF NOT EXISTS counts (owner TEXT NOT NULL, context TEXT NOT NULL,"
    " state TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (owner, context, state)) WITHOUT ROWID",
    "CREATE TRIGGER IF NOT EXISTS counted_in AFTER INSERT ON tasks BEGIN"
    " INSERT INTO counts VALUES (new.owner, '*', '*', 1), (new.owner, '*', '=' || new.state, 1),"
    " (new.owner, '=' || new.context, '*', 1), (new.owner, '=' || new.context, '=' || new.state, 1)"
    " ON CONFLICT (owner, context, state) DO UPDATE SET n = n + 1; END",
    "CREATE TRIGGER IF NOT EXISTS counted_out AFTER DELETE ON tasks BEGIN"
    " UPDATE counts SET n = n - 1 WHERE owner = old.owner"
    " AND context IN ('*', '=' || old.context) AND state IN ('*', '=' || old.state); END",
    "CREATE TRIGGER IF NOT EXISTS recounted AFTER UPDATE OF state ON tasks"
    " WHEN old.state IS NOT new.state BEGIN"
    " UPDATE counts SET n = n - 1 WHERE owner = old.owner"
    " AND context IN ('*', '=' || old.context) AND state = '=' || old.state;"
    " INSERT INTO counts VALUES (new.owner, '*', '=' || new.state, 1),"
    " (new.owner, '=' || new.context, '=' || new.state, 1)"
    " ON CONFLICT (owner, context, state) DO UPDATE SET n = n + 1; END",
    "CREATE TABLE IF NOT EXISTS events (task_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " body TEXT NOT NULL, PRIMARY KEY (task_id, seq)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS history (task_id TEXT NOT NULL, seq INTEGER NOT NULL,"
    " ts REAL NOT NULL, state TEXT NOT NULL, PRIMARY KEY (task_id, seq)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS contexts (context TEXT PRIMARY KEY, owner TEXT NOT NULL)"
    " WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS times (name TEXT PRIMARY KEY, at REAL NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS documents (name TEXT PRIMARY KEY, version TEXT NOT NULL,"
    " body TEXT NOT NULL, expires REAL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS documents_expiring ON documents (expires)"
    " WHERE expires IS NOT NULL",
    "CREATE TABLE IF NOT EXISTS indexes (name TEXT NOT NULL, member TEXT NOT NULL,"
    " score REAL NOT NULL, PRIMARY KEY (name, member)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS indexes_scored ON indexes (name, score, member)",
)

_RECOUNT: Final = (
    "INSERT INTO counts SELECT owner, c, s, count(*) FROM ("
    " SELECT owner, '*' AS c, '*' AS s FROM tasks"
    " UNION ALL SELECT owner, '*', '=' || state FROM tasks"
    " UNION ALL SELECT owner, '=' || context, '*' FROM tasks"
    " UNION ALL SELECT owner, '=' || context, '=' || state FROM tasks)"
    " GROUP BY owner, c, s"
)


def recount(connection: Any) -> None:
    """Inside a write: the counts of tasks written before counts were kept
    (none kept yet, tasks there); else nothing."""
    if connection.execute("SELECT 1 FROM counts LIMIT 1").fetchone() is None:
        connection.execute(_RECOUNT)


# A task's row and the events after its `base`, in one statement (so as of
# one moment): one row per event of the tail, or one with no event.
READ: Final = (
    "SELECT t.id, t.doc, t.seq, e.body FROM tasks t LEFT JOIN events e"
    " ON e.task_id = t.id AND e.seq > t.base"
    " WHERE t.id {ids} AND (t.expires IS NULL OR t.expires > ?) ORDER BY t.id, e.seq"
)


def read_one(connection: Any, task_id: str, now: float) -> Record | None:
    return read_many(connection, [task_id], now).get(task_id)


def read_many(connection: Any, task_ids: list[str], now: float) -> dict[str, Record]:
    """The tasks of `task_ids` still kept, each folded from its row; an
    unreadable one is left out."""
    if not task_ids:
        return {}
    marks = ",".join("?" * len(task_ids))
    rows = connection.execute(READ.format(ids=f"IN ({marks})"), (*task_ids, now)).fetchall()
    return records_of(rows)


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
            events = [decode(body) for body in tail]
        except ValueError:
            continue
        if isinstance(task, dict):
            records[task_id] = Record(fold(cast(Task, task), events), seq, len(events))
    return records


def events_of(rows: list[Any]) -> list[tuple[int, Any]]:
    """(number, event) of rows of (seq, body); the log ends at an unreadable one."""
    found = []
    for seq, body in rows:
        try:
            found.append((int(seq), decode(body)))
        except ValueError:
            break
    return found
