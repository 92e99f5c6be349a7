"""A real HTTP webhook receiver for the push tests: a threaded server that
records every request and answers each path from a script (statuses and
headers, then 200), optionally pausing a path's first request until told."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Hit:
    path: str
    headers: dict[str, str]  # names lowercased
    body: Any
    status: int  # what the receiver answered
    at: float  # time.monotonic() when it arrived
    raw: bytes = b""  # the body's bytes as sent

    @property
    def event_id(self) -> int:
        return int(self.headers["x-a2a-event-id"])


@dataclass
class Receiver:
    host: str = "127.0.0.1"
    port: int = 0
    hits: list[Hit] = field(default_factory=list)
    scripts: dict[str, list[tuple[int, dict[str, str]]]] = field(default_factory=dict)
    pauses: dict[str, threading.Event] = field(default_factory=dict)
    paused: dict[str, threading.Event] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                body = json.loads(raw or b"null")
                status, headers = receiver._answer(self.path)
                hit = Hit(
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                    status,
                    time.monotonic(),
                    raw,
                )
                with receiver._lock:
                    receiver.hits.append(hit)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"

    def script(self, path: str, *answers: tuple[int, dict[str, str]]) -> None:
        self.scripts[path] = list(answers)

    def pause_first(self, path: str) -> threading.Event:
        """The path's first request waits until the returned event is set;
        `paused[path]` is set once it arrived."""
        self.pauses[path] = threading.Event()
        self.paused[path] = threading.Event()
        return self.pauses[path]

    def _answer(self, path: str) -> tuple[int, dict[str, str]]:
        pause = self.pauses.pop(path, None)
        if pause is not None:
            self.paused[path].set()
            pause.wait(30)
        with self._lock:
            script = self.scripts.get(path)
            if script:
                return script.pop(0)
        return 200, {}

    def on(self, path: str) -> list[Hit]:
        with self._lock:
            return [hit for hit in self.hits if hit.path == path]

    def delivered(self, path: str) -> list[Hit]:
        return [hit for hit in self.on(path) if 200 <= hit.status < 300]
