"""The Celery signal handlers a worker connects when its app is built.

Every Celery task's log lines carry its task id and, when the message
brought one, the request id of the web request that queued it
(`shared.ops.correlation`): bound before the task runs, released after.
"""

from __future__ import annotations

from typing import Any

from celery import signals

from shared.ops.correlation import CELERY_HEADER, bind

_BINDING = "toolnexus_binding"


def bind_deliveries() -> None:
    """Connect the handlers that bind each delivery's log context (once per process)."""
    signals.task_prerun.connect(_bind, weak=False, dispatch_uid="toolnexus-bind")
    signals.task_postrun.connect(_release, weak=False, dispatch_uid="toolnexus-release")


def _bind(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    if task is None:
        return
    request_id = task.request.get(CELERY_HEADER)
    setattr(
        task.request,
        _BINDING,
        bind(request=request_id if isinstance(request_id, str) else None, task=task_id),
    )


def _release(task: Any = None, **_: Any) -> None:
    binding = getattr(task.request, _BINDING, None) if task is not None else None
    if binding is not None:
        binding.release()
