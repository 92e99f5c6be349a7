"""One error hierarchy for the whole service.

Each class names a fault a peer may need to hear about; `web/core/errors.py` maps
them to JSON-RPC error codes in one place, so nothing else in the code base
needs to know a wire number.
"""

from __future__ import annotations


class ToolnexusError(Exception):
    """Base of every error this service raises on purpose."""


class ConfigError(ToolnexusError):
    """A setting is missing or malformed; the message names the variable."""


class Unsupported(ToolnexusError):
    """The configured store cannot do this at all (a user's two-method store
    has no listing, for one); the message says what and why."""


class StoreError(ToolnexusError):
    """The task store could not be reached or refused to answer. `reason` is
    the short cause an operator may see (`/readyz`): no addresses, no secrets."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class InvalidTaskId(ToolnexusError, ValueError):
    """A task id that is not a safe, bounded identifier."""


class BrokerError(ToolnexusError):
    """The message broker could not be reached, so a task was not enqueued."""


class TaskNotFound(ToolnexusError):
    """No task has the given id."""


class TaskNotCancelable(ToolnexusError):
    """The task is already in a terminal state."""


class InvalidTransition(ToolnexusError):
    """The state machine does not allow the requested change."""


class ContextTaken(ToolnexusError):
    """A new task named a context that another caller's tasks already use."""


class ContextBusy(ToolnexusError):
    """A new task refused because an earlier task of its context is still
    submitted or working (the same-context policy `reject`): `metadata`
    names that task and the context."""

    def __init__(self, message: str, *, task_id: str, context_id: str) -> None:
        super().__init__(message)
        self.metadata = {"busyTaskId": task_id, "contextId": context_id}


class OwnerLimitExceeded(ToolnexusError):
    """A send over its owner's limits (`shared.owners.admission`), refused
    before anything of it is saved or queued: `limit` names which one
    ("rate" or "max_active"), `retry_after` the seconds after which a send
    may be accepted again."""

    def __init__(self, message: str, *, limit: str, retry_after: float) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after = retry_after
        self.metadata = {"limit": limit}


class NotReplicated(StoreError):
    """A write the store's master took but too few replicas confirmed in time:
    it may vanish in a failover, so it is not acknowledged as done."""
