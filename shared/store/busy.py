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
    id; its own as the store lists it, which may have stamped its status
    later than it was made). Raises `Unsupported` on a store that keeps no
    listing."""
    listed = list(busy_in(store, str(task.get("owner", "")), str(task.get("contextId", ""))))
    itself = next((other for other in listed if other["id"] == task.get("id")), task)
    mine = _order(itself)
    for other in listed:
        if other["id"] != task.get("id") and (state_of(other) == WORKING or _order(other) < mine):
            yield other


def busy_in(store: Store, owner: str, context_id: str) -> Iterator[Task]:
    """Every busy task of the context, each once. Submitted ones are listed
    first: one claimed between the two listings is then in both, never in
    neither (a task only becomes `working` from `submitted`, or stays so)."""
    seen: set[str] = set()
    for state in (SUBMITTED, WORKING):
        after = None
        while True:
            page = store.listing(Query(owner, context_id, state, None, _PAGE, time.time(), after))
            for task in page.tasks:
                if task["id"] not in seen:
                    seen.add(task["id"])
                    yield task
            if page.last is None:
                break
            after = page.last


def _order(task: Mapping[str, Any]) -> tuple[str, str]:
    return (str(task.get("status", {}).get("timestamp", "")), str(task.get("id", "")))
