"""ListTasks on the SQL task log (`shared.stores.sql.tasks`): a page read in
one transaction, from the listing indexes.

A task sits where its status time was at the listing's moment (see
`shared.store.listing`): the tasks whose status time is at or before that
moment are read in index order (by owner, or by owner and context), below
the cursor, one page at most; the few that changed since are placed by
their last status change before the moment (`history`) and merged in. The
total comes from the kept counts (`counts`: owner, context or '*', state or
'*' -> n, summed: a database may keep one count in several rows).
"""

from __future__ import annotations

from shared.store.listing import Listing, Position, Query, as_of, matches, merged_page
from shared.stores.sql.runner import Transaction
from shared.stores.sql.tasks import ALIVE, read_many


def answer(t: Transaction, query: Query, now: float) -> Listing:
    """The page of `query`, read inside one read transaction."""
    scope, params = _filters(t, query, state=False)
    params |= {"now": now, "as_of": query.as_of, "size": query.size + 1}
    unmoved = [*scope, ALIVE, "ts <= :as_of"]
    if query.state is not None:
        unmoved.append("state = :state")
    if query.updated_after is not None:
        unmoved.append("ts > :updated_after")
        params["updated_after"] = query.updated_after
    where = " AND ".join(unmoved)
    total = _counted(t, query, now)
    if total is None:
        (total,) = t.one(f"SELECT count(*) FROM tasks WHERE {where}", params)
    below = ""
    if query.after is not None:
        below = " AND (ts, id) < (:after_ts, :after_id)"
        params |= {"after_ts": query.after[0], "after_id": query.after[1]}
    found: list[Position] = [
        (float(ts), str(task_id))
        for ts, task_id in t.rows(
            f"SELECT ts, id FROM tasks WHERE {where}{below} ORDER BY ts DESC, id DESC LIMIT :size",
            params,
        )
    ]
    moved = _moved(t, " AND ".join([*scope, ALIVE, "ts > :as_of"]), params, query)
    page, more = merged_page(found, moved, query)
    records = read_many(t, [task_id for _, task_id in page], now)
    tasks = [records[task_id].task for _, task_id in page if task_id in records]
    return Listing(tasks, int(total) + len(moved), page[-1] if more and page else None)


def _counted(t: Transaction, query: Query, now: float) -> int | None:
    """The tasks a listing counts as they stood at its moment, from the kept
    counts: the owner's (in the context, in the state) less those that
    changed since the moment (placed apart, by their history) and those
    expired but not yet purged; None where the query filters by time."""
    if query.updated_after is not None:
        return None
    match, params = _filters(t, query, state=True)
    params |= {
        "now": now,
        "as_of": query.as_of,
        "in_context": "*" if query.context_id is None else f"={t.dialect.key(query.context_id)}",
        "in_state": "*" if query.state is None else f"={query.state}",
    }
    (kept,) = t.one(
        "SELECT coalesce(sum(n), 0) FROM counts WHERE owner = :owner AND context = :in_context"
        " AND state = :in_state",
        params,
    )
    where = " AND ".join(match)
    (later,) = t.one(f"SELECT count(*) FROM tasks WHERE {where} AND ts > :as_of", params)
    (expired,) = t.one(
        f"SELECT count(*) FROM tasks {{expiring}} WHERE expires <= :now AND {where}"
        " AND ts <= :as_of",
        params,
    )
    return int(kept) - int(later) - int(expired)


def _filters(t: Transaction, query: Query, *, state: bool) -> tuple[list[str], dict[str, object]]:
    """The conditions (and their parameters) on the owner, the context and,
    with `state`, the state a query asks for."""
    where = ["owner = :owner"]
    params: dict[str, object] = {"owner": t.dialect.key(query.owner)}
    if query.context_id is not None:
        where.append("context = :context")
        params["context"] = t.dialect.key(query.context_id)
    if query.state is not None:
        params["state"] = query.state
        if state:
            where.append("state = :state")
    return where, params


def _moved(t: Transaction, where: str, params: dict[str, object], query: Query) -> list[Position]:
    """The tasks that changed since the listing's moment and match it as they
    were then, each at its position then."""
    history: dict[str, list[tuple[float, str]]] = {}
    rows = t.rows(
        "SELECT h.task_id, h.ts, h.state FROM history h"
        f" WHERE h.task_id IN (SELECT id FROM tasks WHERE {where}) ORDER BY h.task_id, h.seq",
        params,
    )
    for task_id, ts, state in rows:
        history.setdefault(str(task_id), []).append((float(ts), str(state)))
    positions: list[Position] = []
    for task_id, changes in history.items():
        then = as_of(changes, query.as_of)
        if then is not None and matches(query, then[1], then[0]):
            positions.append((then[0], task_id))
    return positions
