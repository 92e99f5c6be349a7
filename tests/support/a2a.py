"""A tiny A2A 0.3 JSON-RPC client over real HTTP, for end-to-end tests."""

from __future__ import annotations

import uuid
from typing import Any

import requests

from shared.task import TERMINAL_STATES
from tests.support.polling import wait_for


def call(url: str, method: str, params: dict[str, Any], timeout: float = 10) -> dict[str, Any]:
    """The whole JSON-RPC reply (result or error)."""
    body = {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": method, "params": params}
    reply: dict[str, Any] = requests.post(f"{url}/", json=body, timeout=timeout).json()
    assert reply.get("jsonrpc") == "2.0" and reply.get("id") == body["id"], reply
    return reply


def result(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    reply = call(url, method, params)
    assert "error" not in reply, reply
    answer: dict[str, Any] = reply["result"]
    return answer


def send_request(text: str, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """A whole JSON-RPC message/send request, non-blocking, with a fresh messageId."""
    message: dict[str, Any] = {
        "role": "user",
        "messageId": str(uuid.uuid4()),
        "parts": [{"kind": "text", "text": text}],
    }
    if metadata is not None:
        message["metadata"] = metadata
    params = {"message": message, "configuration": {"blocking": False}}
    return {"jsonrpc": "2.0", "id": str(uuid.uuid4()), "method": "message/send", "params": params}


def send_text(url: str, text: str) -> dict[str, Any]:
    """message/send, non-blocking: the submitted task."""
    return result(url, "message/send", send_request(text)["params"])


def get_task(url: str, task_id: str) -> dict[str, Any]:
    return result(url, "tasks/get", {"id": task_id})


def wait_state(
    url: str, task_id: str, states: frozenset[str] = TERMINAL_STATES, timeout: float = 30
) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        task = get_task(url, task_id)
        return task if task["status"]["state"] in states else None

    return wait_for(reached, timeout=timeout, what=f"task {task_id} to reach {sorted(states)}")


def readyz(url: str, timeout: float = 15) -> int:
    """The front end's /readyz status code; 0 when it does not answer."""
    try:
        return requests.get(f"{url}/readyz", timeout=timeout).status_code
    except requests.RequestException:
        return 0


def wait_ready(url: str, timeout: float = 60) -> None:
    wait_for(lambda: readyz(url) == 200, timeout=timeout, what=f"{url}/readyz to answer 200")
