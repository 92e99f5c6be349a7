"""Pooled Redis connections checking readiness without the hub, in a gevent-patched process.

redis-py asks every connection it takes from a pool whether anything waits
on its socket (unread data would be a protocol out of step), with a zero
timeout. With hiredis that check is a `select.poll` object made per call; in
a process gevent has patched (the front end's gunicorn workers, the
embedded server) that object is gevent's emulation, which makes a watcher
and goes through the hub each time, about ten times the cost of the
system call, on every command. A zero-timeout poll never blocks, so the
operating system's own is as cooperative as gevent's: it is used for those.
Checks that may wait (a timeout given) keep gevent's.

This replaces one function of redis-py's hiredis parser module;
`tests/test_redis_green.py` fails by name when that function moves.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any

from redis._parsers import hiredis as hiredis_parser

from shared.ops.patching import gevent_patched

_installed = False


def readiness_without_hub(
    os_poll: Callable[[], Any], gevent_check: Callable[[Any, float], bool]
) -> Callable[[Any, float], bool]:
    """A `_socket_can_read(sock, timeout)` asking the OS's `poll` for zero
    timeouts and `gevent_check` for the rest."""

    def can_read(sock: Any, timeout: float) -> bool:
        if timeout != 0:
            return gevent_check(sock, timeout)
        # TLS keeps decrypted bytes above the socket, where poll cannot see them.
        pending = getattr(sock, "pending", None)
        if pending is not None and pending():
            return True
        poller = os_poll()
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))

    return can_read


def check_readiness_off_the_hub() -> None:
    """Where gevent patched the process, make redis-py's zero-timeout
    readiness checks the OS's poll (once per process; elsewhere nothing)."""
    global _installed
    if _installed or not gevent_patched():
        return
    from gevent import monkey

    setattr(  # noqa: B010 (a module's function, replaced by name)
        hiredis_parser,
        "_socket_can_read",
        readiness_without_hub(
            monkey.get_original("select", "poll"), hiredis_parser._socket_can_read
        ),
    )
    _installed = True
