"""A task read ahead for the call that asks for it.

A process that answers many GetTask calls from one thread (the gRPC
process's event loop) reads the tasks of the calls waiting at one moment
together, in one round trip (`shared.store.contract.ReadsTogether`), then
answers each call in turn as it answers any: the call's own read of its
task (`Tasks.get`) takes what was read for it instead of asking the store
again. That read began after the call arrived, so the answer is as fresh
as a read of its own would have been.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final

from shared.task import Task

# (task id, the task as read for the call; None: the store had none)
_AHEAD: Final[ContextVar[tuple[str, Task | None] | None]] = ContextVar("read_ahead", default=None)


@contextmanager
def reading_ahead(task_id: str, task: Task | None) -> Iterator[None]:
    """Within: a read of `task_id` is `task`, read for this call already."""
    token = _AHEAD.set((task_id, task))
    try:
        yield
    finally:
        _AHEAD.reset(token)


def read_task(task_id: str, read: Callable[[str], Task | None]) -> Task | None:
    """The task read ahead for this call, else `read(task_id)`."""
    ahead = _AHEAD.get()
    if ahead is not None and ahead[0] == task_id:
        return ahead[1]
    return read(task_id)
