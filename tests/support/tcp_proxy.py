"""A TCP proxy a test can cut: to the programs behind it, the server is gone.

Used where the server itself is shared and must not be stopped (the
machine's RabbitMQ): `cut()` closes the listening socket and every proxied
connection (clients see resets, then refused connects, as when a broker
dies), `restore()` listens again on the same port.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.support.redis_server import free_port


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._listener: socket.socket | None = None

    def __enter__(self) -> TcpProxy:
        return self.restore()

    def __exit__(self, *exc: object) -> None:
        self.cut()

    def restore(self) -> TcpProxy:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            doomed = list(self._sockets)
            self._sockets.clear()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
            listener.close()
        for sock in doomed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self._sockets.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            with self._lock:
                self._sockets.discard(source)
                self._sockets.discard(sink)
