"""A steady load of sends and reads against a front end, every reply kept:
what the outage scenarios judge (tests/test_reliability_*outage.py)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import requests

from tests.support.a2a import call

CLIENT_TIMEOUT = 60.0  # a request still unanswered by then counts as hung


def succeeded(reply: dict[str, Any] | str) -> bool:
    return isinstance(reply, dict) and "result" in reply


def error_reply(reply: dict[str, Any] | str) -> bool:
    return isinstance(reply, dict) and "error" in reply


def error_kind(reply: dict[str, Any] | str) -> str:
    if isinstance(reply, dict) and "error" in reply:
        return str(reply["error"]["message"]).split(":")[0]
    return repr(reply)[:40]


class Load:
    """Sends tasks and polls them from a thread, recording every reply."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ids: list[str] = []
        self.replies: list[tuple[float, float, dict[str, Any] | str]] = []  # sent, took, reply
        self.sends: list[tuple[float, float, dict[str, Any] | str]] = []  # SendMessage's alone
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(CLIENT_TIMEOUT * 2)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            message = {
                "role": "user",
                "messageId": str(uuid.uuid4()),
                "parts": [{"kind": "text", "text": f"0.2 load {n}"}],
            }
            params = {"message": message, "configuration": {"blocking": False}}
            for method, body in (("message/send", params), ("tasks/get", None)):
                if method == "tasks/get":
                    if not self.ids:
                        continue
                    body = {"id": self.ids[-1]}
                started = time.monotonic()
                try:
                    reply: dict[str, Any] | str = call(self.url, method, body, CLIENT_TIMEOUT)
                except requests.RequestException as error:
                    reply = f"no reply: {error}"
                record = (started, time.monotonic() - started, reply)
                self.replies.append(record)
                if method == "message/send":
                    self.sends.append(record)
                    if succeeded(reply):
                        self.ids.append(reply["result"]["id"])
            time.sleep(0.02)
