"""Which request and which task the current code is working for.

A request id is taken from the caller's `X-Request-ID` when it is a safe
token, or made here; the web tier echoes it, puts it in the Celery message
(`CELERY_HEADER`) and the worker binds it again, so one grep finds a task's
lines in every process. Context variables, not thread-locals: each greenlet
(gunicorn's gevent workers) and each thread has its own.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Final

REQUEST_ID_HEADER: Final = "X-Request-ID"
CELERY_HEADER: Final = "toolnexus_request_id"
# Printable, no spaces or quotes: safe in a log line, a header and a JSON string.
_SAFE_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/+=@-]{0,127}")

_request_id: ContextVar[str | None] = ContextVar("toolnexus_request_id", default=None)
_task_id: ContextVar[str | None] = ContextVar("toolnexus_task_id", default=None)


def new_request_id() -> str:
    """32 random hex digits. An id to find a request by, not a secret: from
    `random`'s generator (seeded from the OS, and again in every forked
    process), which costs no system call as `os.urandom` would per request."""
    return f"{random.getrandbits(128):032x}"


def accepted_request_id(given: object) -> str:
    """The caller's id when it is a safe token of at most 128 characters, else a new one."""
    if isinstance(given, str) and _SAFE_ID.fullmatch(given):
        return given
    return new_request_id()


def request_id() -> str | None:
    return _request_id.get()


def task_id() -> str | None:
    return _task_id.get()


class Binding:
    """Ids bound by `bind`; `release()` restores what was bound before."""

    def __init__(self, request: str | None, task: str | None) -> None:
        self._tokens: list[tuple[ContextVar[str | None], Token[str | None]]] = []
        if request is not None:
            self._tokens.append((_request_id, _request_id.set(request)))
        if task is not None:
            self._tokens.append((_task_id, _task_id.set(task)))

    def release(self) -> None:
        for variable, token in reversed(self._tokens):
            variable.reset(token)
        self._tokens = []


def bind(*, request: str | None = None, task: str | None = None) -> Binding:
    """Bind a request id and/or a task id until `release()` (for paired hooks)."""
    return Binding(request, task)


@contextmanager
def correlated(*, request: str | None = None, task: str | None = None) -> Iterator[None]:
    """Bind a request id and/or a task id for the code run inside."""
    binding = bind(request=request, task=task)
    try:
        yield
    finally:
        binding.release()
