"""The SQLite store's tables.

tasks, events, history, contexts
          the task log (`shared.stores.sql.tasks`); a task's lineage turns
          to 1 when the machine went down since the database was last opened
counts    (owner, context or '*', state or '*') -> how many tasks, kept by triggers
times     named times: the reaper's last run (`reaper`), the latest
          moment a listing read as of (`listed`), the boot of the machine
          that last opened it (`boot`)
documents small documents (`shared.stores.sql.documents`)
indexes   scored indexes (`shared.stores.sql.indexes`)
"""

from __future__ import annotations

from typing import Any, Final

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
