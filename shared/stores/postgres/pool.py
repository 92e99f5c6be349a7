"""Connections that never cross a fork.

gunicorn may build the app before it forks its workers, and Celery's
prefork pool forks children from a parent that already used the store. A
libpq connection shared by two processes interleaves their bytes on one
socket, so each process opens its own pool on first use. A child must not
close what it inherited either (closing sends the server a Terminate on
the parent's session): the inherited pool is kept, unused, for the life of
the child.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from shared.ops.patching import gevent_patched
from shared.stores.postgres.session import Abandoned, connection_class

# Pools inherited across a fork: never used again, never closed (see above).
_INHERITED: list[object] = []


class ForkSafePool:
    def __init__(
        self,
        conninfo: str,
        *,
        size: int,
        timeout: float,
        answer_within: float,
        configure: Callable[[Any], None],
    ) -> None:
        """`timeout`: how long a caller waits for a pooled connection (and a
        new one to connect); `answer_within`: the store's timeout, which
        bounds every wait for the server (`shared.stores.postgres.session`)."""
        self._conninfo = conninfo
        self._size = size
        self._timeout = timeout
        self._answer_within = answer_within
        self._configure = configure
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Any] | None = None
        self._pid = os.getpid()
        ref = weakref.ref(self)

        def forked() -> None:
            if (found := ref()) is not None:
                found._forked()

        def closing() -> None:
            if (found := ref()) is not None:
                found.close()

        os.register_at_fork(after_in_child=forked)
        # Closed before the interpreter tears down the threads (or a gevent
        # worker's greenlets) that the pool's own finaliser would wait on.
        atexit.register(closing)

    def _forked(self) -> None:
        self._lock = threading.Lock()  # a lock held in the parent stays held in the child
        if self._pool is not None:
            _INHERITED.append(self._pool)
        self._pool, self._pid = None, os.getpid()

    def _opened(self) -> ConnectionPool[Any]:
        pool = self._pool
        if pool is not None and self._pid == os.getpid():
            return pool
        with self._lock:
            if self._pid != os.getpid():
                self._forked()
            if self._pool is None:
                # Published once open: a thread that finds it unlocked uses it at once.
                pool = ConnectionPool(
                    self._conninfo,
                    # Decided when the pool opens: gunicorn's gevent worker
                    # has patched the process by its first request.
                    connection_class=connection_class(self._answer_within, green=gevent_patched()),
                    min_size=1,
                    max_size=self._size,
                    timeout=self._timeout,
                    kwargs={"autocommit": True, "connect_timeout": max(1, int(self._timeout))},
                    configure=self._configure,
                    open=False,
                    name="toolnexus-store",
                )
                # wait=False: the first connection is made in the background;
                # a request that needs one waits at most `timeout` for it.
                pool.open(wait=False)
                self._pool = pool
            return self._pool

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        pool = self._opened()
        with pool.connection() as conn:
            try:
                yield conn
            except Abandoned:
                # One connection went silent: those made with it were likely
                # lost the same way (a partition, a middlebox dropping them).
                # They are replaced now, not found one deadline at a time.
                pool.drain()
                raise

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.close()
