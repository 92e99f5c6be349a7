"""ListTasks on SQLite: a page read in one transaction, from the listing indexes.

A task sits where its status time was at the listing's moment (see
`shared.store.listing`): the tasks whose status time is at or before that
moment are read in index order (`tasks_by_owner`, or `tasks_by_context`),
below the cursor, one page at most; the few that changed since are placed
by their last status change before the moment (`history`) and merged in.
"""

from __future__ import annotations

from typing import Any

from shared.store.listing import Listing, Position, Query, as_of, matches, merged_page
from shared.stores.sqlite.tables import read_many


def answer(connection: Any, query: Query, now: float) -> Listing:
    """The page of `query`, read on `connection` inside one read transaction."""
    scope, args = _filters(query, state=False)
    scope.append("(expires IS NULL OR expires > ?)")
    args.append(now)
    unmoved, unmoved_args = [*scope, "ts <= ?"], [*args, query.as_of]
    if query.state is not None:
        unmoved.append("state = ?")
        unmoved_args.append(query.state)
    if query.updated_after is not None:
        unmoved.append("ts > ?")
        unmoved_args.append(query.updated_after)
    where = " AND ".join(unmoved)
    total = _counted(connection, query, now)
    if total is None:
        count = f"SELECT count(*) FROM tasks WHERE {where}"
        (total,) = connection.execute(count, unmoved_args).fetchone()
    below, below_args = "", []
    if query.after is not None:
        below, below_args = " AND (ts, id) < (?, ?)", list(query.after)
    found: list[Position] = [
        (float(ts), str(task_id))
        for ts, task_id in connection.execute(
            f"SELECT ts, id FROM tasks WHERE {where}{below} ORDER BY ts DESC, id DESC LIMIT ?",
            [*unmoved_args, *below_args, query.size + 1],
        )
    ]
    moved = _moved(connection, " AND ".join([*scope, "ts > ?"]), [*args, query.as_of], query)
    page, more = merged_page(found, moved, query)
    records = read_many(connection, [task_id for _, task_id in page], now)
    tasks = [records[task_id].task for _, task_id in page if task_id in records]
    return Listing(tasks, int(total) + len(moved), page[-1] if more and page else None)


def _counted(connection: Any, query: Query, now: float) -> int | None:
    """The tasks a listing counts as they stood at its moment, from the kept
    counts: the owner's (in the context, in the state) less those that
    changed since the moment (placed apart, by their history) and those
    expired but not yet purged; None where the query filters by time."""
    if query.updated_after is not None:
        return None
    context = "*" if query.context_id is None else f"={query.context_id}"
    state = "*" if query.state is None else f"={query.state}"
    row = connection.execute(
        "SELECT n FROM counts WHERE owner = ? AND context = ? AND state = ?",
        (query.owner, context, state),
    ).fetchone()
    match, args = _filters(query, state=True)
    where = " AND ".join(match)
    (later,) = connection.execute(
        f"SELECT count(*) FROM tasks WHERE {where} AND ts > ?", [*args, query.as_of]
    ).fetchone()
    (expired,) = connection.execute(
        f"SELECT count(*) FROM tasks INDEXED BY tasks_expiring WHERE expires <= ? AND {where}"
        " AND ts <= ?",
        [now, *args, query.as_of],
    ).fetchone()
    return (int(row[0]) if row else 0) - int(later) - int(expired)


def _filters(query: Query, *, state: bool) -> tuple[list[str], list[object]]:
    """The conditions (and their arguments) on the owner, the context and,
    with `state`, the state a query asks for."""
    where: list[str] = ["owner = ?"]
    args: list[object] = [query.owner]
    if query.context_id is not None:
        where.append("context = ?")
        args.append(query.context_id)
    if state and query.state is not None:
        where.append("state = ?")
        args.append(query.state)
    return where, args


def _moved(connection: Any, where: str, args: list[object], query: Query) -> list[Position]:
    """The tasks that changed since the listing's moment and match it as they
    were then, each at its position then."""
    history: dict[str, list[tuple[float, str]]] = {}
    rows = connection.execute(
        "SELECT h.task_id, h.ts, h.state FROM history h"
        f" WHERE h.task_id IN (SELECT id FROM tasks WHERE {where}) ORDER BY h.task_id, h.seq",
        args,
    )
    for task_id, ts, state in rows:
        history.setdefault(str(task_id), []).append((float(ts), str(state)))
    positions: list[Position] = []
    for task_id, changes in history.items():
        then = as_of(changes, query.as_of)
        if then is not None and matches(query, then[1], then[0]):
            positions.append((then[0], task_id))
    return positions
