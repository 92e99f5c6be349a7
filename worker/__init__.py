"""Workers: the fulfilment engine, free of Celery (`worker.engine`), the Celery
runtime that runs it (`worker.runtime`), push delivery (`worker.push`), the
`toolnexus-serve` command (`worker.cli`) and the one-process embedded mode
(`worker.embedded`).

`celery -A worker worker` and `celery -A worker beat` find the Celery app as
`worker.app`. It is built from the `TOOLNEXUS_*` environment on first access
(the one global in the code base), so importing `worker.engine.fulfil` or running
the embedded launcher never reads the environment behind anyone's back.
A bad setting stops start-up with one line naming the variable; so does the
per-process memory store, which workers and beat cannot share.
"""

from __future__ import annotations

import sys
from typing import Any

_app: Any = None


def __getattr__(name: str) -> Any:
    global _app
    if name != "app":
        raise AttributeError(f"module 'worker' has no attribute {name!r}")
    if _app is None:
        _app = _entry_point()
    return _app


def _entry_point() -> Any:
    if {"-h", "--help"} & set(sys.argv[1:]):
        # `celery -A worker worker --help`: Celery's help needs an app, not the
        # settings; a bare one answers it.
        from celery import Celery

        return Celery("toolnexus", set_as_current=False)
    from shared.errors import ConfigError
    from shared.ops.startup import refuse_private_store
    from shared.settings import Settings
    from shared.store.wiring import open_store
    from worker.engine.agent import load_agent
    from worker.runtime import startup
    from worker.runtime.app import create_celery

    try:
        settings = Settings.from_env()
        # A worker that cannot import its function or its store must not start
        # and then fail (and acknowledge) every task it takes.
        load_agent(settings)
        open_store(settings)
        refuse_private_store(settings, "Celery")
    except ConfigError as error:
        print(f"toolnexus: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    startup.install(settings)
    return create_celery(settings)
