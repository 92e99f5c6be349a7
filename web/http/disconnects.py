"""Notice at once when a streaming client goes away.

An open stream mostly waits for its task's next event; a client that
disconnects meanwhile would only be noticed at the next write (a keepalive,
up to TOOLNEXUS_KEEPALIVE seconds later). One thread per process (a greenlet
under gevent) watches the sockets of all open streams instead: when a peer
closes its end, that stream's waiter is woken and the stream ends, freeing
everything it kept.

A process that is going away (SIGTERM) ends all of its streams the same
way (`end_streams`): each client sees its stream end cleanly and resumes on
another front end from the last event id it saw.
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, Final

log = logging.getLogger(__name__)

# Where the WSGI servers put the client's socket: gunicorn, the embedded
# server (web.http.gevent_server), and werkzeug's development server (what the
# tests' in-process live servers run on).
SOCKET_KEY = "toolnexus.socket"
_SOCKET_KEYS = ("gunicorn.socket", SOCKET_KEY, "werkzeug.socket")
# Where an app keeps its monitor in `app.extensions` (`web.app.create_app`).
HANGUPS: Final = "toolnexus.hangups"


class Hangup:
    """Set once the peer of one stream has closed its connection, or the
    process ends the stream (`HangupMonitor.end_all`)."""

    def __init__(self) -> None:
        self._set = threading.Event()
        self._lock = threading.Lock()
        self._wakers: list[Callable[[], None]] = []

    def is_set(self) -> bool:
        return self._set.is_set()

    def add_waker(self, wake: Callable[[], None]) -> None:
        """Call `wake` when the peer hangs up (at once if it already has)."""
        with self._lock:
            if not self._set.is_set():
                self._wakers.append(wake)
                return
        wake()

    def fire(self) -> None:
        with self._lock:
            self._set.set()
            wakers, self._wakers = self._wakers, []
        for wake in wakers:
            wake()


class HangupMonitor:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._selector: selectors.BaseSelector | None = None
        self._wakeup: tuple[socket.socket, socket.socket] | None = None
        self._open: set[Hangup] = set()
        self._ending = False

    @property
    def ending(self) -> bool:
        """Whether the process ends its streams (`end_all` was called): the
        edge ends a stream opened since once it has sent an event with an id."""
        return self._ending

    def end_all(self) -> None:
        """End every open stream now: the process is going away."""
        with self._lock:
            self._ending = True
            hangups = list(self._open)
        for hangup in hangups:
            hangup.fire()

    @contextmanager
    def watching(self, environ: dict[str, Any]) -> Iterator[Hangup]:
        """A Hangup for this request's connection, watched while the block runs
        (set by a peer's hang-up only when the server exposes the socket)."""
        hangup = Hangup()
        with self._lock:
            self._open.add(hangup)
        try:
            with self._watched(environ, hangup):
                yield hangup
        finally:
            with self._lock:
                self._open.discard(hangup)

    @contextmanager
    def _watched(self, environ: dict[str, Any], hangup: Hangup) -> Iterator[None]:
        sock = next((environ[key] for key in _SOCKET_KEYS if key in environ), None)
        if not isinstance(sock, socket.socket) or sock.fileno() < 0:
            yield
            return
        selector = self._running()
        try:
            with self._lock:
                selector.register(sock, selectors.EVENT_READ, hangup)
        except (ValueError, KeyError, OSError):
            yield  # already closed, or watched twice: writes will tell
            return
        self._poke()
        try:
            yield
        finally:
            self._unwatch(selector, sock)

    def _running(self) -> selectors.BaseSelector:
        with self._lock:
            if self._pid != os.getpid() or self._selector is None:
                self._pid = os.getpid()
                self._selector = selectors.DefaultSelector()
                self._wakeup = socket.socketpair()
                self._wakeup[0].setblocking(False)
                self._selector.register(self._wakeup[0], selectors.EVENT_READ, None)
                threading.Thread(
                    target=self._watch,
                    args=(self._selector,),
                    name="toolnexus-hangups",
                    daemon=True,
                ).start()
            return self._selector

    def _poke(self) -> None:
        """Make the watcher pick up a new socket now, not at its next wake-up."""
        if self._wakeup is not None:
            with suppress(OSError):  # full: a wake-up is already pending
                self._wakeup[1].send(b"x")

    def _watch(self, selector: selectors.BaseSelector) -> None:
        while True:
            for key, _ in selector.select(timeout=5.0):
                if key.data is None:
                    self._drain(key.fileobj)
                    continue
                alive = self._alive(key.fileobj)
                if alive is not None:
                    # Closed, or talking (alive, but no longer our business).
                    self._unwatch(selector, key.fileobj)
                if alive is False:
                    key.data.fire()

    def _unwatch(self, selector: selectors.BaseSelector, sock: Any) -> None:
        with self._lock, suppress(KeyError, ValueError, OSError):
            selector.unregister(sock)  # the other side may have let go of it already

    @staticmethod
    def _alive(sock: Any) -> bool | None:
        """False when the peer has closed (EOF or an error), True when it sent
        bytes, None when the readiness was spurious."""
        try:
            peeked = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None
        except OSError:
            return False
        return bool(peeked)

    @staticmethod
    def _drain(wakeup: Any) -> None:
        try:
            while wakeup.recv(512):
                pass
        except BlockingIOError:
            pass
        except OSError:
            log.debug("hangups: the wake-up socket failed", exc_info=True)


def end_streams(app: Any) -> None:
    """End every open stream of `app` (one `web.app.create_app` made; any
    other has none to end): the process is going away."""
    monitor = getattr(app, "extensions", {}).get(HANGUPS)
    if isinstance(monitor, HangupMonitor):
        monitor.end_all()
