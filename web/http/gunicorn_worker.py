"""gunicorn's gevent worker, answering requests it cannot parse with JSON,
and its logger, building access lines only when asked for.

`web.http.gunicorn_conf` names these as `worker_class` and `logger_class`. gunicorn
keeps its own judgement (which status a broken request gets, what is
logged); only the page changes: the HTML it writes is swapped, on its way
to the socket, for the JSON of `web.http.errors`, with the same status.
"""

from __future__ import annotations

import re
from typing import Any, Final

from gunicorn.glogging import Logger
from gunicorn.workers.ggevent import GeventWorker

from web.http.errors import framing_error_response

_STATUS_LINE: Final = re.compile(rb"HTTP/1\.[01] (\d{3}) ")


class _JsonErrorPage:
    """The client socket as `handle_error` sees it: the error page written to
    it goes out as JSON; everything else is the socket's own."""

    def __init__(self, sock: Any) -> None:
        self._sock = sock

    def sendall(self, data: bytes) -> None:
        status = _STATUS_LINE.match(data)
        self._sock.sendall(framing_error_response(int(status.group(1)) if status else 400))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


class JsonErrorWorker(GeventWorker):  # type: ignore[misc]
    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        super().handle_error(req, _JsonErrorPage(client), addr, exc)


class AccessOnRequestLogger(Logger):  # type: ignore[misc]
    """gunicorn's logger, with access lines only when `--access-logfile` asks.

    gunicorn counts any `logconfig_dict` as asking for them, so it gathered
    every request's log atoms only to drop the line: the app logs one line
    per request itself (web.http.observe)."""

    def _compute_access_log_enabled(self) -> bool:
        return bool(self.cfg.accesslog)
