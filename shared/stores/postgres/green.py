"""The pool's connections waiting on gevent's hub, where gevent has patched the process.

psycopg picks its wait function once, when imported: in a process gevent
has patched (gunicorn's gevent workers) it takes `wait_poll`, which then
runs gevent's emulation of `select.poll` on every wait: a poll object, a
result event, a watcher and a timer for psycopg's 0.1 s interval, each
made and torn down per call, which costs every read CPU time in the
client (docs/postgresql.md has the figures). These connections wait on
one I/O watcher of the hub instead. Elsewhere (Celery's children, plain
threads) psycopg's own C wait is kept.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.abc import RV, PQGen
from psycopg.waiting import Ready


class HubConnection(psycopg.Connection[Any]):
    """A connection whose statements wait on the hub's watcher of its socket."""

    def wait(self, gen: PQGen[RV], interval: float = 0.1, timeout: float | None = None) -> RV:
        if timeout is not None:  # the rare bounded waits (a cancel): psycopg's own
            return super().wait(gen, interval, timeout)
        return _on_hub(gen, self.pgconn.socket)


def _on_hub(gen: PQGen[RV], fileno: int) -> RV:
    """Drive psycopg's generator: each state it yields (read, write or both:
    the same bits as the loop's READ and WRITE) is one watcher's wait, its
    events what the generator is sent back."""
    from gevent import get_hub
    from gevent.hub import Waiter

    hub = get_hub()
    try:
        wanted = next(gen)
        while True:
            watcher = hub.loop.io(fileno, int(wanted))
            waiter = Waiter(hub)
            watcher.start(waiter.switch, pass_events=True)
            try:
                events = waiter.get()
            finally:
                watcher.stop()
                watcher.close()
            wanted = gen.send(Ready(events & Ready.RW))
    except StopIteration as done:
        result: RV = done.value
        return result
