"""What a new task does while an earlier task of its context is still busy.

A context is one caller's conversation; its tasks are listed by the store
(its context and state filters, as ListTasks uses them: `shared.store.busy`).
A task is *busy* while `submitted` or `working` (a run released for another
attempt is still `working`); a task waiting for the peer is not. The policy
of a new task:

- `parallel`: it runs beside the busy ones (the A2A default);
- `queue`: it stays `submitted` until no task of its context is working and
  none submitted before it is still waiting (the worker's delivery checks,
  and looks again a little later while the context is busy);
- `reject`: it is refused, naming the busy task (`ContextBusy`);
- `interrupt`: the busy ones are canceled (their runs stop at their next
  step and can write nothing more) and it runs once they are, waiting as a
  queued one does for the cancels to land.

The deployment's default is `TOOLNEXUS_SAME_CONTEXT`; a message may choose
its own under `toolnexus.sameContext` in its metadata. A task that waits
carries its policy under a private field (`FIELD`, never shown to a peer);
the store's claim leaves such a task to the worker, which looks at its
context first (`shared.transitions.claim`, `worker.engine.fulfil`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from shared.task import epoch

PARALLEL: Final = "parallel"
QUEUE: Final = "queue"
REJECT: Final = "reject"
INTERRUPT: Final = "interrupt"
POLICIES: Final = (PARALLEL, QUEUE, REJECT, INTERRUPT)
METADATA_KEY: Final = "toolnexus.sameContext"
FIELD: Final = "sameContext"
_WAITING: Final = frozenset({QUEUE, INTERRUPT})
# How long a delivery that found its context busy leaves before looking
# again: a tenth of the time the task has waited, within these bounds.
LOOK_AGAIN_MIN: Final = 0.2
LOOK_AGAIN_MAX: Final = 2.0


def policy_in(metadata: object) -> object:
    """The policy a message's metadata names, as given (None: none named)."""
    return metadata.get(METADATA_KEY) if isinstance(metadata, Mapping) else None


def waits_for_context(task: Mapping[str, Any]) -> bool:
    """Whether the task starts only once its context is free."""
    return task.get(FIELD) in _WAITING


def look_again_after(task: Mapping[str, Any], now: float) -> float:
    """Seconds until a waiting task's next look at its context."""
    waited = now - epoch(str(task.get("status", {}).get("timestamp", "")))
    return min(LOOK_AGAIN_MAX, max(LOOK_AGAIN_MIN, waited / 10))
