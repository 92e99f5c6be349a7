"""ListTasks on PostgreSQL: one statement per page, from the listing indexes.

A task sits where its status time was at the listing's moment (see
`shared.store.listing`): tasks whose status time is at or before that moment are
read in index order (`tasks_by_owner`, `_by_context` or `_by_state`,
keyset below the cursor); the few that changed since are placed by their
last status change before the moment (`history`). The page, its tasks and
the total come from one statement, so one snapshot: a task moving
meanwhile is counted and shown exactly once.

The total starts from the owner's kept count (migration 0012) where the
query has no filter on the status time or the context; else the tasks are
counted. The statement runs with sequential scans off: a count is answered
by the listing indexes alone (they hold every column a count reads), but
where one owner holds most tasks PostgreSQL's default costs rate a read of
the whole table as the cheaper way, and that read is several times slower:
it reads every task's document to count it. With them off, a count reads
the index.
"""

from __future__ import annotations

from typing import Any, Final

import psycopg
from psycopg import sql

from shared.keys import digest
from shared.store.listing import Listing, Query
from shared.stores.postgres.records import TAIL, record_of

# Local to the statement's transaction: nothing else on the connection
# plans without them.
INDEX_READS: Final = "SET LOCAL enable_seqscan = off"


def answer(conn: psycopg.Connection[Any], query: Query, now: float) -> Listing:
    # The listing's moment made known to the writes first, in a transaction
    # of its own: a status stamped at or before it and saved after this is
    # filed just after it (see the migration 0003_listing_moment), and the
    # page's own statement, later, sees every write that was not.
    conn.execute("SELECT listing_at(%s::float8)", (query.as_of,), prepare=True)
    statement, params = page_statement(query, now)
    # One round trip: the transaction, its setting and the statement are
    # sent together and read when the pipeline ends.
    with conn.pipeline(), conn.transaction():
        conn.execute(INDEX_READS, prepare=True)
        cursor = conn.execute(statement, params)
    return listing_of(cursor.fetchall(), query.size)


def page_statement(query: Query, now: float) -> tuple[sql.Composed, dict[str, Any]]:
    """The one statement of a page: (its text, its parameters); each row
    (total, id, status time, document, event number, tail), no task in a
    row when there is none to show."""
    scope = [sql.SQL("t.o = %(o)s")]
    params: dict[str, Any] = {
        "o": digest(query.owner),
        "as_of": query.as_of,
        "now": now,
        "size": query.size + 1,
    }
    if query.context_id is not None:
        scope.append(sql.SQL("t.c = %(c)s"))
        params["c"] = digest(query.context_id)
    unmoved = [*scope, sql.SQL("t.ts <= %(as_of)s::float8")]
    moved = [*scope, sql.SQL("t.ts > %(as_of)s::float8")]
    then: list[sql.Composable] = []
    matching = list(scope)  # the kept count's tasks: in scope, in the state asked for
    if query.state is not None:
        matching.append(sql.SQL("t.state = %(state)s"))
        unmoved.append(sql.SQL("t.state = %(state)s"))
        then.append(sql.SQL("h.state = %(state)s"))
        params["state"] = query.state
    if query.updated_after is not None:
        unmoved.append(sql.SQL("t.ts > %(low)s::float8"))
        then.append(sql.SQL("h.ts > %(low)s::float8"))
        params["low"] = query.updated_after
    alive = sql.SQL("alive(t.expires, %(now)s::float8)")
    unmoved.append(alive)
    moved.append(alive)
    # Below the cursor: an unmoved task by its own position, a moved one by
    # where it was at the listing's moment.
    below, moved_below = sql.SQL("true"), sql.SQL("")
    if query.after is not None:
        below = sql.SQL('(t.ts, t.id) < (%(after_ts)s::float8, %(after_id)s::text COLLATE "C")')
        moved_below = sql.SQL(
            ' AND (h.ts, t.id) < (%(after_ts)s::float8, %(after_id)s::text COLLATE "C")'
        )
        params["after_ts"], params["after_id"] = query.after
    parts = {
        "unmoved": sql.SQL(" AND ").join(unmoved),
        "moved": sql.SQL(" AND ").join(moved)
        + sql.SQL("").join(sql.SQL(" AND ") + part for part in then),
        "latest": sql.SQL(
            " CROSS JOIN LATERAL ("
            "   SELECT ts, state FROM history WHERE task_id = t.id"
            "   AND ts <= %(as_of)s::float8 ORDER BY seq DESC LIMIT 1) h"
        ),
    }
    moved_count = sql.SQL("(SELECT count(*) FROM tasks t{latest} WHERE {moved})").format(**parts)
    if query.updated_after is None and query.context_id is None:
        # The owner's kept count (migration 0012), less the tasks it counts
        # that the moment does not: those filed after it (placed apart, as
        # they were then) and those expired but not yet purged.
        params["ks"] = "*" if query.state is None else f"={query.state}"
        counted = sql.SQL(
            "SELECT (SELECT coalesce(sum(n), 0) FROM counts WHERE o = %(o)s AND state = %(ks)s)"
            " - (SELECT count(*) FROM tasks t WHERE {matching} AND t.ts > %(as_of)s::float8)"
            " - (SELECT count(*) FROM tasks t WHERE {matching} AND t.ts <= %(as_of)s::float8"
            "    AND t.expires <= %(now)s::float8)"
            " + {moved_count} AS n"
        ).format(matching=sql.SQL(" AND ").join(matching), moved_count=moved_count)
    else:
        # Counted apart, each branch a scan of its index alone (a context's
        # tasks are few).
        counted = sql.SQL(
            "SELECT (SELECT count(*) FROM tasks t WHERE {unmoved}) + {moved_count} AS n"
        ).format(unmoved=parts["unmoved"], moved_count=moved_count)
    # The page: the unmoved tasks read in their index's order below the
    # cursor, no more than a page holds, beside the few that moved; then merged.
    page_of = sql.SQL(
        "(SELECT t.id, t.ts FROM tasks t WHERE {unmoved} AND {below}"
        "  ORDER BY t.ts DESC, t.id DESC LIMIT %(size)s)"
        " UNION ALL (SELECT t.id, h.ts FROM tasks t{latest} WHERE {moved}{moved_below})"
    ).format(below=below, moved_below=moved_below, **parts)
    statement = sql.SQL(
        "SELECT total.n, page.id, page.ts, page.doc, page.seq, page.tail"
        " FROM ({counted}) total"
        " LEFT JOIN LATERAL ("
        "   SELECT p.id, p.ts, t.doc, t.seq, {tail} AS tail"
        "   FROM ({page_of}) p JOIN tasks t ON t.id = p.id"
        "   ORDER BY p.ts DESC, p.id DESC LIMIT %(size)s) page ON true"
        " ORDER BY page.ts DESC, page.id DESC"
    ).format(counted=counted, page_of=page_of, tail=sql.SQL(TAIL))
    return statement, params


def listing_of(rows: list[Any], size: int) -> Listing:
    total = int(rows[0][0]) if rows else 0
    page = [row for row in rows if row[1] is not None]
    more = len(page) > size
    page = page[:size]
    tasks = []
    for _, _, _, doc, seq, tail in page:
        record = record_of(doc, seq, tail)
        if record is not None:
            tasks.append(record.task)
    last = (float(page[-1][2]), str(page[-1][1])) if more and page else None
    return Listing(tasks, total, last)
