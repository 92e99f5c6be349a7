"""Whether the process's start-up had gevent patch the standard library.

The front end's gunicorn workers and the embedded server patch it before
anything else is imported; Celery's workers, the gRPC process and plain
scripts do not. Clients of blocking libraries pick how they wait from this.
"""

from __future__ import annotations

import sys
import threading


def gevent_patched() -> bool:
    """Whether gevent has patched `select` here."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("select"))


def os_thread_local() -> threading.local:
    """Storage of each OS thread: where gevent has patched `threading`, its
    `local` is one per greenlet, and this is the one it replaced."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("threading"):
        made: threading.local = monkey.get_original("_thread", "_local")()
        return made
    return threading.local()
