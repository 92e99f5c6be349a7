"""A loopback TCP proxy that injects link faults between programs and a server.

`FaultProxy(host, port)` listens on a port of its own and forwards each
connection to the server. Faults, each lasting until `heal()`:

- `slow(latency, jitter)`: every chunk, each way, waits latency +- jitter;
- `cut()`: every open connection is reset (new ones go through);
- `black_hole()`: connections are accepted and kept, but nothing is
  forwarded either way (kept back, as TCP keeps bytes on a link that drops
  packets: delivered once the link heals, unless a side gave up first);
- `one_way()`: the server hears the programs, the programs hear nothing;
- `partition()`: every connection open now, and every one made while it
  lasts, is lost for good: nothing is forwarded on it again, either way,
  even after `heal()`, and a side that closes it is not heard by the other
  (as when a middlebox drops a connection's state, or a host goes away in
  a partition: its FIN never arrives). Each side keeps its end until it
  closes it itself: a server keeps a session whose client is gone, with
  whatever that session holds, until its own timeouts end it, and a program
  waits for an answer that never comes until its own deadline. (The proxy's
  kernel acknowledges keepalive probes, so TCP keepalive cannot tell either
  side here; only timeouts of their own can.) New connections after the
  heal go through; `reset_programs()` then resets the programs' ends of the
  lost connections, leaving the servers' (as a client whose TCP gave up
  first: it connects again at once, while the server still holds its old
  session);
- `refuse()`: the server is gone: every open connection is reset and new
  ones are refused, until `start()` listens again on the same port (for a
  server others share, which a test must not stop).

`proxied(url, port)` is a server's URL with the proxy in its place.

Threads, not asyncio: a test's programs are other processes, and the
proxy must keep forwarding while the test's own thread waits. Usable from
`bench/` tools as well as tests.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from tests.support.ports import free_port

_CHUNK = 65536
_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s


@dataclass(eq=False)
class _Link:
    """One connection through the proxy: the program's socket and the
    server's (None for one made while partitioned: never connected on)."""

    client: socket.socket
    server: socket.socket | None
    lost: bool = False


class FaultProxy:
    def __init__(self, target_host: str, target_port: int, *, seed: int = 0) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._rng = random.Random(seed)
        self._changed = threading.Condition()
        self._latency = self._jitter = 0.0
        self._stopped_up = self._stopped_down = False  # to the server / to the programs
        self._partitioned = False
        self._links: set[_Link] = set()
        self._listener: socket.socket | None = None
        self._closed = False

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def fault(self) -> str:
        """What the link suffers now ("" when healthy)."""
        with self._changed:
            if self._partitioned:
                return "partition"
            if self._stopped_up and self._stopped_down:
                return "black hole"
            if self._stopped_down:
                return "one way"
            return f"latency {self._latency:g} s" if self._latency else ""

    def start(self) -> FaultProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(256)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def slow(self, latency: float, jitter: float = 0.0) -> None:
        with self._changed:
            self._latency, self._jitter = latency, jitter

    def black_hole(self) -> None:
        with self._changed:
            self._stopped_up = self._stopped_down = True

    def one_way(self) -> None:
        with self._changed:
            self._stopped_down = True

    def partition(self) -> None:
        with self._changed:
            self._partitioned = True
            for link in self._links:
                link.lost = True
            self._changed.notify_all()  # waiting chunks of the lost links are dropped

    def reset_programs(self) -> None:
        """Reset the programs' ends of the connections a partition lost."""
        with self._changed:
            lost = [link for link in self._links if link.lost]
        for link in lost:
            with contextlib.suppress(OSError):
                link.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
                link.client.shutdown(socket.SHUT_RD)
            with contextlib.suppress(OSError):
                link.client.close()

    def heal(self) -> None:
        """Ends the fault; connections a partition lost stay lost."""
        with self._changed:
            self._latency = self._jitter = 0.0
            self._stopped_up = self._stopped_down = self._partitioned = False
            self._changed.notify_all()

    def cut(self) -> None:
        """Reset every open connection; the proxy keeps listening."""
        with self._changed:
            links, self._links = self._links, set()
        sockets = [sock for link in links for sock in (link.client, link.server) if sock]
        for sock in sockets:
            with contextlib.suppress(OSError):
                # SO_LINGER 0: the close is a reset, as when the server's host
                # dies; SHUT_RD wakes this socket's pump, blocked in recv.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET)
                sock.shutdown(socket.SHUT_RD)
            with contextlib.suppress(OSError):
                sock.close()

    def refuse(self) -> None:
        """Stop listening and reset every open connection; `start()` undoes it."""
        with self._changed:
            listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            with contextlib.suppress(OSError):
                listener.close()
        self.cut()

    def close(self) -> None:
        self._closed = True
        self.heal()
        self.refuse()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed, or refusing
            with self._changed:
                partitioned = self._partitioned
            server: socket.socket | None = None
            if not partitioned:  # (a partition's new connections reach nothing)
                try:
                    server = socket.create_connection(self.target, timeout=5)
                    server.settimeout(None)
                except OSError:
                    client.close()  # the server is down: so is the link
                    continue
            link = _Link(client, server, lost=partitioned)
            for sock in (client, server):
                if sock is not None:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._changed:
                if self._listener is not listener:  # refused meanwhile
                    client.close()
                    if server is not None:
                        server.close()
                    return
                self._links.add(link)
            threading.Thread(target=self._pump, args=(link, True), daemon=True).start()
            if server is not None:
                threading.Thread(target=self._pump, args=(link, False), daemon=True).start()

    def _pump(self, link: _Link, upstream: bool) -> None:
        source, sink = (link.client, link.server) if upstream else (link.server, link.client)
        assert source is not None
        try:
            while data := source.recv(_CHUNK):
                delay = self._wait_to_forward(link, upstream)
                if delay is None:
                    continue  # lost: dropped
                if delay:
                    time.sleep(delay)
                assert sink is not None
                sink.sendall(data)
        except OSError:
            pass
        finally:
            # A lost link's other side never hears of this end.
            ends = (source,) if link.lost else (source, sink)
            for sock in ends:
                if sock is None:
                    continue
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()
            with self._changed:
                if all(sock is None or sock.fileno() == -1 for sock in (link.client, link.server)):
                    self._links.discard(link)

    def _wait_to_forward(self, link: _Link, upstream: bool) -> float | None:
        """Wait while this direction is stopped; the delay to add to a chunk
        (None: the link is lost, the chunk dropped)."""
        with self._changed:
            while (
                (self._stopped_up if upstream else self._stopped_down)
                and not self._closed
                and not link.lost
            ):
                self._changed.wait(0.5)
            if link.lost:
                return None
            if not self._latency:
                return 0.0
            return max(0.0, self._latency + self._rng.uniform(-self._jitter, self._jitter))


def proxied(url: str, port: int) -> str:
    """`url` (redis://, postgresql://, amqp://) with its host and port
    replaced by the proxy's on loopback; login, path and query kept."""
    target = urlsplit(url)
    login = target.netloc.rpartition("@")[0]
    netloc = f"{login}@127.0.0.1:{port}" if login else f"127.0.0.1:{port}"
    return target._replace(netloc=netloc).geturl()


def proxy_for(url: str, default_port: int, *, seed: int = 0) -> FaultProxy:
    """A proxy (not started) in front of the server `url` names."""
    target = urlsplit(url)
    return FaultProxy(target.hostname or "127.0.0.1", target.port or default_port, seed=seed)
