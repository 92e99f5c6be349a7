"""Whether the process's start-up had gevent patch the standard library.

The front end's gunicorn workers and the embedded server patch it before
anything else is imported; Celery's workers, the gRPC process and plain
scripts do not. Clients of blocking libraries pick how they wait from this.
"""

from __future__ import annotations

import sys


def gevent_patched() -> bool:
    """Whether gevent has patched `select` here."""
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("select"))
