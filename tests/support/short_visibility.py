"""`python -m tests.support.short_visibility SECONDS worker ...`: what
`celery -A worker worker ...` runs, with the broker's visibility timeout
shortened to SECONDS (it is the hard time limit + 60 s, 390 s by default)
and expired messages looked for on every idle poll, so a test sees a dead
worker's messages redelivered without waiting that long."""

from __future__ import annotations

import sys

import worker


def main(argv: list[str]) -> None:
    seconds, *celery_args = argv
    app = worker.app
    app.conf.broker_transport_options = {
        **app.conf.broker_transport_options,
        "visibility_timeout": float(seconds),
        "unacked_restore_throttle": 1,
    }
    app.worker_main(celery_args)


if __name__ == "__main__":
    main(sys.argv[1:])
