"""Flower with every page behind its login, /metrics and /healthcheck included.

    python -m worker.runtime.flower_login [flower options]   # in place of `celery -A worker flower`

Flower leaves those two pages open whatever login it is given, by design and
with no option to change it (its authentication docs list them as exempt).
Its metrics name every task type and worker host, and the port may be
reachable by more than the operators, so this wraps both handlers in
Tornado's `authenticated` decorator, the one that guards every other Flower
page, and then runs `celery -A worker flower` unchanged. A Prometheus scrape
of Flower's /metrics gives the same basic_auth as a person does.

It also adds `/owners` (`worker.runtime.flower_owners`): every owner's tasks
held for their turn and in flight, behind the same login.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import tornado.web
from celery.bin.celery import main as celery_main
from flower.views import monitor

from worker.runtime.flower_owners import add_owners_page

OPEN_PAGES = (monitor.Metrics, monitor.Healthcheck)


def require_login() -> None:
    for handler in OPEN_PAGES:
        if not hasattr(handler.get, "__wrapped__"):  # not guarded yet
            setattr(handler, "get", tornado.web.authenticated(handler.get))  # noqa: B010


USAGE = """usage: python -m worker.runtime.flower_login [flower options] (toolnexus-serve flower)

Flower (`celery -A worker flower`) with every page behind its login,
/metrics and /healthcheck included, and /owners: every owner's tasks
waiting for their turn and in flight. Flower's options (--port, --address,
--basic-auth, ...) and its FLOWER_* variables work as usual; the TOOLNEXUS_*
settings name the broker and the store."""


def main(argv: Sequence[str] | None = None) -> None:
    options = sys.argv[1:] if argv is None else list(argv)
    if options in (["-h"], ["--help"]):
        # Flower's own help needs the Celery app, hence the settings: not for --help.
        print(USAGE)
        return
    require_login()
    add_owners_page()
    sys.argv = ["celery", "-A", "worker", "flower", *options]
    celery_main()


if __name__ == "__main__":
    main()
