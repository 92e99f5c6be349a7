"""Helpers for the front-end tests (no tests here).

`PlayingDispatcher` stands in for the worker package, which the front end
never imports: it records what web asks of it and, when `auto` is on,
fulfils each task in a thread through `shared.transitions.transition`,
saving the same shapes the worker saves (`shared.task`).
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from werkzeug.serving import make_server

from shared.errors import BrokerError
from shared.events import Event, artifact_update, status_update, to_state
from shared.store.contract import TaskStore
from shared.task import COMPLETED, INPUT_REQUIRED, WORKING, Task, agent_message, new_id
from shared.transitions import transition
from tests.support.redis_server import free_port
from tests.support.shortcuts import latest_user_text

ASK = "ask me"  # a message with this text makes the playing worker ask back
QUESTION = "What is your name?"


def complete(store: TaskStore, task_id: str, text: str | None = None) -> Task | None:
    """submitted -> working -> completed, as the echo agent would."""
    transition(store, task_id, to_state(WORKING))

    def finish(task: Task) -> list[Event]:
        answer = text if text is not None else f"ran: {latest_user_text(task)}"
        artifact = {"artifactId": new_id(), "name": "result", "parts": [_text(answer)]}
        return [
            artifact_update(task, artifact),  # type: ignore[arg-type]
            status_update(task, COMPLETED, agent_message(answer)),
        ]

    return transition(store, task_id, finish).task


def ask_back(store: TaskStore, task_id: str) -> Task | None:
    """submitted -> working -> input-required with the question in status.message."""
    transition(store, task_id, to_state(WORKING))
    return transition(store, task_id, to_state(INPUT_REQUIRED, agent_message(QUESTION))).task


def _text(text: str) -> dict[str, str]:
    return {"kind": "text", "text": text}


class NoBroker:
    """A dispatcher whose broker always answers and never runs anything: for
    tests about something else. It says it takes turns (`takes_turns`), as the
    service's own dispatchers do: with no worker's slots registered, one task
    is in flight and the rest wait in the turn book, for the tests of that."""

    takes_turns = True

    def enqueue(self, task_id: str) -> None:
        pass

    def revoke(self, task_id: str) -> None:
        pass

    def check(self) -> None:
        pass


class PlayingDispatcher:
    def __init__(self, store: TaskStore, *, auto: bool = True) -> None:
        self.store = store
        self.auto = auto
        self.enqueued: list[str] = []
        self.revoked: list[str] = []
        self.broken = False

    def enqueue(self, task_id: str) -> None:
        if self.broken:
            raise BrokerError("broker unavailable: test broker is down")
        self.enqueued.append(task_id)
        if self.auto:
            threading.Thread(target=self._fulfil, args=(task_id,), daemon=True).start()

    def revoke(self, task_id: str) -> None:
        self.revoked.append(task_id)

    def check(self) -> None:
        if self.broken:
            raise BrokerError("broker unavailable: test broker is down")

    def _fulfil(self, task_id: str) -> None:
        task = self.store.get(task_id)
        if task is not None and latest_user_text(task) == ASK:
            ask_back(self.store, task_id)
        else:
            complete(self.store, task_id)


def user_message(text: str = "hello", **extra: Any) -> dict[str, Any]:
    """A 0.3-shaped user message with a message id of its own."""
    parts = [{"kind": "text", "text": text}]
    message = {"kind": "message", "role": "user", "messageId": f"m-{new_id()}", "parts": parts}
    return {**message, **extra}


def rpc(
    client: FlaskClient,
    method: str,
    params: Any = None,
    *,
    version: str | None = None,
    request_id: Any = 1,
    headers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """POST one JSON-RPC request; return the parsed reply (asserting HTTP 200)."""
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    sent = {"Content-Type": "application/json", **(headers or {})}
    if version is not None:
        sent["A2A-Version"] = version
    response = client.post("/", data=json.dumps(body), headers=sent)
    assert response.status_code == 200, response.data
    reply = response.get_json()
    assert isinstance(reply, dict)
    return reply


class Recorded:
    """What a live server received: (A2A-Version header, JSON-RPC method) per POST."""

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, str | None]] = []


@contextmanager
def live_server(app: Flask) -> Iterator[tuple[str, Recorded]]:
    """Serve `app` over real HTTP on a free port, threaded; yield its base URL."""
    recorded = Recorded()
    inner = app.wsgi_app

    def recording(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("REQUEST_METHOD") == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            raw = environ["wsgi.input"].read(length)
            try:
                method = json.loads(raw).get("method")
            except (ValueError, AttributeError):
                method = None
            recorded.calls.append((environ.get("HTTP_A2A_VERSION"), method))
            environ["wsgi.input"] = io.BytesIO(raw)
        return inner(environ, start_response)

    app.wsgi_app = recording  # type: ignore[method-assign]
    port = free_port()
    server = make_server("127.0.0.1", port, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", recorded
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()
