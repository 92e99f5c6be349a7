"""The busy tasks of a context (`shared.contexts`), found with the store's
listing: its context and state filters, as ListTasks uses them."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any, Final

from shared.store.contract import Store
from shared.store.listing import Query
from shared.task import SUBMITTED, WORKING, Task, state_of

# Tasks read per listing page while looking through a context.
_PAGE: Final = 100


def ahead_of(store: Store, task: Mapping[str, Any]) -> Iterator[Task]:
    """The other busy tasks of `task`'s context that it comes after: every
    one working, and every one submitted before it (by status time, then
    id). Raises `Unsupported` on a store that keeps no listing."""
    mine = _order(task)
    for other in busy_in(store, str(task.get("owner", "")), str(task.get("contextId", ""))):
        if other["id"] == task.get("id"):
            continue
        if state_of(other) == WORKING or _order(other) < mine:
            yield other


def busy_in(store: Store, owner: str, context_id: str) -> Iterator[Task]:
    """Every busy task of the context, working ones first."""
    for state in (WORKING, SUBMITTED):
        after = None
        while True:
            page = store.listing(Query(owner, context_id, state, None, _PAGE, time.time(), after))
            yield from page.tasks
            if page.last is None:
                break
            after = page.last


def _order(task: Mapping[str, Any]) -> tuple[str, str]:
    return (str(task.get("status", {}).get("timestamp", "")), str(task.get("id", "")))
