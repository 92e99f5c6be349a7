"""The pool's connections waiting on gevent's hub, where gevent has patched the process.

psycopg picks its wait function once, when imported: in a process gevent
has patched (gunicorn's gevent workers) it takes `wait_poll`, which then
runs gevent's emulation of `select.poll` on every wait: a poll object, a
result event, a watcher and a timer for psycopg's 0.1 s interval, each
made and torn down per call, which costs every read CPU time in the
client (docs/postgresql.md has the figures). These connections wait on
one I/O watcher of the hub instead, and one timer for the wait's deadline
(`shared.stores.postgres.session`). Elsewhere (Celery's children, plain
threads) psycopg's own C wait is kept.
"""

from __future__ import annotations

import psycopg
from psycopg.abc import RV, PQGen
from psycopg.waiting import Ready


def on_hub(gen: PQGen[RV], fileno: int, timeout: float) -> RV:
    """Drive psycopg's generator: each state it yields (read, write or both:
    the same bits as the loop's READ and WRITE) is one watcher's wait, its
    events what the generator is sent back; all of it within `timeout`
    seconds, else `psycopg.OperationalError` (the call still out)."""
    from gevent import get_hub
    from gevent.hub import Waiter

    hub = get_hub()
    waiting: list[Waiter[int | None]] = []  # the wait under way, for the timer to end

    def expired() -> None:
        if waiting:
            waiting[-1].switch(None)

    timer = hub.loop.timer(timeout)
    timer.start(expired)
    try:
        wanted = next(gen)
        while True:
            watcher = hub.loop.io(fileno, int(wanted))
            waiter: Waiter[int | None] = Waiter(hub)
            waiting[:] = [waiter]
            watcher.start(waiter.switch, pass_events=True)
            try:
                events = waiter.get()
            finally:
                watcher.stop()
                watcher.close()
            if events is None:
                raise psycopg.OperationalError(f"no answer within {timeout:g} s")
            wanted = gen.send(Ready(events & Ready.RW))
    except StopIteration as done:
        result: RV = done.value
        return result
    finally:
        timer.stop()
        timer.close()
