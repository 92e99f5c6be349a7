"""What rich agents produce, as each dialect shows it: file and data
artifacts, every new state, and a direct message reply, through the front
end with real example agents on in-process workers."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared import Settings, memory_store
from tests.test_web_support import rpc
from web import create_app
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher

Client = Callable[[str], FlaskClient]
DIALECTS = pytest.mark.parametrize(
    ("method", "version", "blocking"),
    [("SendMessage", None, True), ("message/send", None, None), ("SendMessage", "1.0", None)],
    ids=["toolnexus", "a2a-0.3", "a2a-1.0"],
)


@pytest.fixture
def client() -> Iterator[Client]:
    dispatchers: list[InProcessDispatcher] = []

    def make(run: str) -> FlaskClient:
        settings = Settings(run=run, blocking_timeout=10, input_modes=("*/*",))
        store = memory_store()
        dispatcher = InProcessDispatcher(store, load_agent(settings), settings, threads=2)
        dispatchers.append(dispatcher)
        return create_app(settings, store=store, dispatcher=dispatcher).test_client()

    yield make
    for dispatcher in dispatchers:
        dispatcher.close(timeout=5)


def send(
    client: FlaskClient, method: str, version: str | None, blocking: bool | None, text: str
) -> Any:
    message = {"role": "user", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}
    params: dict[str, Any] = {"message": message}
    if blocking is not None:
        params["configuration"] = {"blocking": blocking}
    reply = rpc(client, method, params, version=version)
    assert "error" not in reply, reply
    result = reply["result"]
    return result.get("task", result) if version == "1.0" and "task" in result else result


@DIALECTS
def test_file_and_data_artifacts(
    client: Client, method: str, version: str | None, blocking: bool | None
) -> None:
    task = send(client("examples.agents:report"), method, version, blocking, "a bb")
    file_part, data_part = (artifact["parts"][0] for artifact in task["artifacts"])
    if version == "1.0":
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert file_part == {"raw": "QSBCQg==", "filename": "shout.txt", "mediaType": "text/plain"}
        assert data_part == {"data": {"words": 2, "longest": "bb"}}
    else:
        assert task["status"]["state"] == "completed"
        assert file_part == {
            "kind": "file",
            "file": {"bytes": "QSBCQg==", "name": "shout.txt", "mimeType": "text/plain"},
        }
        assert data_part == {"kind": "data", "data": {"words": 2, "longest": "bb"}}


@DIALECTS
@pytest.mark.parametrize(
    ("run", "text", "state"),
    [
        ("examples.agents:ask_back", "hi", "input-required"),
        ("examples.agents:polite", "do it", "rejected"),
        ("examples.tck:agent", "x", "input-required"),
    ],
)
def test_the_new_states_in_each_spelling(
    client: Client,
    method: str,
    version: str | None,
    blocking: bool | None,
    run: str,
    text: str,
    state: str,
) -> None:
    task = send(client(run), method, version, blocking, text)
    expected = "TASK_STATE_" + state.upper().replace("-", "_") if version == "1.0" else state
    assert task["status"]["state"] == expected
    assert task["status"]["message"]["parts"]


@DIALECTS
def test_a_message_reply_is_what_a_blocking_send_returns(
    client: Client, method: str, version: str | None, blocking: bool | None
) -> None:
    app = client("examples.agents:answer")
    message = {"role": "user", "messageId": str(uuid.uuid4()), "parts": [{"text": "four"}]}
    params: dict[str, Any] = {"message": message}
    if blocking is not None:
        params["configuration"] = {"blocking": blocking}
    result = rpc(app, method, params, version=version)["result"]
    if version == "1.0":
        assert set(result) == {"message"}
        assert result["message"]["role"] == "ROLE_AGENT"
        assert result["message"]["parts"] == [{"text": "You said 4 characters."}]
    else:
        assert result["kind"] == "message" and result["role"] == "agent"
        assert result["parts"] == [{"kind": "text", "text": "You said 4 characters."}]
    # The task is still recorded: GetTask by the reply's task id answers.
    task_id = (result.get("message") or result)["taskId"]
    got = rpc(app, "GetTask", {"id": task_id}, version=version)["result"]
    assert got["history"][-1]["parts"][-1] in (
        {"text": "You said 4 characters."},
        {"kind": "text", "text": "You said 4 characters."},
    )


def test_a_non_blocking_send_of_a_replying_agent_returns_the_task(client: Client) -> None:
    app = client("examples.agents:answer")
    message = {"role": "user", "messageId": str(uuid.uuid4()), "parts": [{"text": "x"}]}
    result = rpc(app, "SendMessage", {"message": message})["result"]
    assert result["kind"] == "task"  # the toolnexus dialect returns at once


def test_0_3_peers_get_non_object_data_wrapped_as_the_sdk_does(client: Client) -> None:
    app = client("examples.tck:agent")
    message = {"role": "user", "messageId": "tck-artifact-data-1", "parts": [{"text": "x"}]}
    task = rpc(app, "message/send", {"message": message})["result"]
    assert task["artifacts"][0]["parts"][0] == {
        "kind": "data",
        "data": {"key": "value", "count": 42},
    }
    # A list value, which 0.3 cannot carry as data, is wrapped for 0.3 and plain in 1.0.
    raw = client("examples.agents:describe_parts")
    parts = [{"data": [1, 2]}]
    message = {"role": "user", "messageId": str(uuid.uuid4()), "parts": parts}
    as_03 = rpc(raw, "message/send", {"message": message})["result"]
    assert as_03["history"][0]["parts"][0] == {
        "kind": "data",
        "data": {"value": [1, 2]},
        "metadata": {"data_part_compat": True},
    }
    as_10 = rpc(raw, "GetTask", {"id": as_03["id"]}, version="1.0")["result"]
    assert as_10["history"][0]["parts"][0] == {"data": [1, 2]}
