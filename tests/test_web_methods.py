"""Every method in every dialect: send (blocking or not), get with
historyLength, continue, cancel, and the on_task hook."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from flask.testing import FlaskClient

from shared import ConfigError, Settings, memory_store
from shared.task import SUBMITTED, new_id, state_of
from tests.support.polling import wait_for
from tests.test_web_support import (
    ASK,
    QUESTION,
    PlayingDispatcher,
    ask_back,
    complete,
    rpc,
    user_message,
)
from web import create_app
from worker.engine.reaper import resend_waiting

HOOK_CALLS: list[tuple[str, str]] = []


def raising_hook(task_id: str, state: str, task: dict[str, Any]) -> None:
    raise RuntimeError("the hook broke")


def record_hook(task_id: str, state: str, task: dict[str, Any]) -> None:
    """TOOLNEXUS_ON_TASK for these tests."""
    HOOK_CALLS.append((task_id, state))


@pytest.fixture
def store() -> Any:
    return memory_store()


def make_client(store: Any, dispatcher: PlayingDispatcher, **settings: Any) -> FlaskClient:
    return create_app(Settings(**settings), store=store, dispatcher=dispatcher).test_client()


@pytest.fixture
def manual(store: Any) -> PlayingDispatcher:
    """Records enqueues; tests complete tasks themselves."""
    return PlayingDispatcher(store, auto=False)


@pytest.fixture
def client(store: Any, manual: PlayingDispatcher) -> FlaskClient:
    return make_client(store, manual, blocking_timeout=0.2)


@pytest.fixture
def auto_client(store: Any) -> FlaskClient:
    """Its playing worker completes every task in a thread."""
    return make_client(store, PlayingDispatcher(store), blocking_timeout=10)


class GatedDispatcher(PlayingDispatcher):
    """Plays each task only once `release` is set."""

    def __init__(self, store: Any, release: threading.Event) -> None:
        super().__init__(store)
        self.release = release

    def _fulfil(self, task_id: str) -> None:
        if self.release.wait(120):
            super()._fulfil(task_id)


def result_of(reply: dict[str, Any]) -> Any:
    assert "error" not in reply, reply
    return reply["result"]


class TestToolnexusDialect:
    def test_send_message_returns_the_submitted_task_itself_at_once(
        self, client: FlaskClient, manual: PlayingDispatcher, store: Any
    ) -> None:
        task = result_of(
            rpc(
                client,
                "SendMessage",
                {"message": {"role": "user", "messageId": "m-9", "parts": [{"text": "hello"}]}},
            )
        )
        assert task["status"]["state"] == "submitted"
        assert task["kind"] == "task"
        assert task["contextId"]
        assert task["history"][0]["parts"] == [{"kind": "text", "text": "hello"}]
        assert task["history"][0]["taskId"] == task["id"]
        assert manual.enqueued == [task["id"]]
        # The stored task keeps its generation, which only A2A 1.1 peers see.
        stored = dict(store.get(task["id"]) or {})
        assert stored.pop("generation") == 1
        assert stored == task

    def test_get_task_polls_to_completion(self, client: FlaskClient, store: Any) -> None:
        task = result_of(rpc(client, "SendMessage", {"message": user_message("hi")}))
        assert result_of(rpc(client, "GetTask", {"id": task["id"]}))["status"]["state"] == (
            "submitted"
        )
        complete(store, task["id"])
        done = result_of(rpc(client, "GetTask", {"id": task["id"]}))
        assert done["status"]["state"] == "completed"
        assert done["artifacts"][0]["parts"] == [{"kind": "text", "text": "ran: hi"}]

    def test_blocking_is_opt_in(self, auto_client: FlaskClient) -> None:
        params = {"message": user_message("hi"), "configuration": {"blocking": True}}
        task = result_of(rpc(auto_client, "SendMessage", params))
        assert task["status"]["state"] == "completed"

    def test_given_context_id_is_kept(self, client: FlaskClient) -> None:
        task = result_of(rpc(client, "SendMessage", {"message": user_message(contextId="ctx-1")}))
        assert task["contextId"] == "ctx-1"


class TestA2A03:
    def test_message_send_blocks_until_completed_by_default(self, auto_client: FlaskClient) -> None:
        task = result_of(rpc(auto_client, "message/send", {"message": user_message("hi")}))
        assert task["kind"] == "task"
        assert task["status"]["state"] == "completed"
        assert task["artifacts"][0]["parts"][0] == {"kind": "text", "text": "ran: hi"}
        assert [m["role"] for m in task["history"]] == ["user", "agent"]

    def test_non_blocking_send_answers_before_the_work_is_done(self, store: Any) -> None:
        # The worker runs no task until released, and the release comes
        # only once the send has answered: a send that blocked would wait
        # for it (up to a blocking bound far beyond the deadline here).
        release = threading.Event()
        dispatcher = GatedDispatcher(store, release)
        client = make_client(store, dispatcher, blocking_timeout=600)
        params = {"message": user_message("hi"), "configuration": {"blocking": False}}
        with ThreadPoolExecutor(1) as pool:
            reply = pool.submit(rpc, client, "message/send", params)
            try:
                answer = reply.result(timeout=60)
            except TimeoutError:
                pytest.fail("the non-blocking send waited for the work")
            finally:
                release.set()
        task = result_of(answer)
        assert task["status"]["state"] == "submitted"
        assert task["history"][0]["parts"][0]["text"] == "hi"
        assert dispatcher.enqueued == [task["id"]]
        wait_for(lambda: state_of(store.get(task["id"])) == "completed", what="the released task")

    def test_blocking_send_returns_as_it_stands_after_the_bound(
        self, client: FlaskClient, manual: PlayingDispatcher
    ) -> None:
        task = result_of(rpc(client, "message/send", {"message": user_message()}))
        assert task["status"]["state"] == "submitted"
        assert manual.enqueued == [task["id"]]

    def test_blocking_send_returns_at_input_required(self, auto_client: FlaskClient) -> None:
        task = result_of(rpc(auto_client, "message/send", {"message": user_message(ASK)}))
        assert task["status"]["state"] == "input-required"
        assert task["status"]["message"]["parts"][0]["text"] == QUESTION

    def test_tasks_get_and_cancel(
        self, client: FlaskClient, manual: PlayingDispatcher, store: Any
    ) -> None:
        params = {"message": user_message(), "configuration": {"blocking": False}}
        task = result_of(rpc(client, "message/send", params))
        got = result_of(rpc(client, "tasks/get", {"id": task["id"]}))
        kept = dict(store.get(task["id"]) or {})
        assert kept.pop("generation") == 1  # shown to A2A 1.1 peers only
        assert got == kept
        canceled = result_of(rpc(client, "tasks/cancel", {"id": task["id"]}))
        assert canceled["status"]["state"] == "canceled"
        assert canceled["kind"] == "task"
        assert manual.revoked == [task["id"]]

    def test_0_3_header_with_pascal_case_names_speaks_0_3(self, auto_client: FlaskClient) -> None:
        task = result_of(
            rpc(auto_client, "SendMessage", {"message": user_message()}, version="0.3")
        )
        assert task["kind"] == "task"
        assert task["status"]["state"] == "completed"  # 0.3 blocks by default


class TestA2A10:
    @property
    def MESSAGE(self) -> dict[str, Any]:
        return {"role": "ROLE_USER", "messageId": f"m-{new_id()}", "parts": [{"text": "hello"}]}

    def test_send_blocks_and_returns_task_wrapper_in_1_0_shapes(
        self, auto_client: FlaskClient, store: Any
    ) -> None:
        reply = result_of(rpc(auto_client, "SendMessage", {"message": self.MESSAGE}, version="1.0"))
        task = reply["task"]
        assert set(reply) == {"task"}
        assert "kind" not in task
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert [m["role"] for m in task["history"]] == ["ROLE_USER", "ROLE_AGENT"]
        assert task["history"][0]["parts"] == [{"text": "hello"}]
        assert task["artifacts"][0]["parts"] == [{"text": "ran: hello"}]
        stored = store.get(task["id"])  # the store keeps the 0.3-like shape
        assert stored["history"][0]["role"] == "user"
        assert stored["history"][0]["parts"] == [{"kind": "text", "text": "hello"}]
        assert stored["status"]["state"] == "completed"

    def test_return_immediately(self, client: FlaskClient) -> None:
        params = {"message": self.MESSAGE, "configuration": {"returnImmediately": True}}
        task = result_of(rpc(client, "SendMessage", params, version="1.0"))["task"]
        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"

    def test_get_and_cancel(self, client: FlaskClient, manual: PlayingDispatcher) -> None:
        params = {"message": self.MESSAGE, "configuration": {"returnImmediately": True}}
        task = result_of(rpc(client, "SendMessage", params, version="1.0"))["task"]
        got = result_of(rpc(client, "GetTask", {"id": task["id"]}, version="1.0"))
        assert got["status"]["state"] == "TASK_STATE_SUBMITTED"
        assert got["history"][0]["role"] == "ROLE_USER"
        canceled = result_of(rpc(client, "CancelTask", {"id": task["id"]}, version="1.0"))
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        assert manual.revoked == [task["id"]]

    def test_slashed_names_are_accepted_under_1_0(self, auto_client: FlaskClient) -> None:
        reply = result_of(
            rpc(auto_client, "message/send", {"message": self.MESSAGE}, version="1.0.0")
        )
        assert reply["task"]["status"]["state"] == "TASK_STATE_COMPLETED"

    def test_version_as_query_parameter(self, client: FlaskClient) -> None:
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "none"}}
        reply = client.post("/?A2A-Version=1.0", json=body).get_json()
        assert reply["error"]["data"][0]["reason"] == "TASK_NOT_FOUND"

    def test_file_and_data_parts_translate_both_ways(
        self, store: Any, manual: PlayingDispatcher
    ) -> None:
        client = make_client(store, manual, input_modes=("*/*",))
        parts = [
            {"url": "https://x.test/a.pdf", "mediaType": "application/pdf", "filename": "a.pdf"},
            {"raw": "aGk=", "mediaType": "text/plain"},
            {"data": {"k": [1, 2]}, "metadata": {"why": "test"}},
        ]
        message = {**self.MESSAGE, "parts": parts}
        params = {"message": message, "configuration": {"returnImmediately": True}}
        task = result_of(rpc(client, "SendMessage", params, version="1.0"))["task"]
        assert task["history"][0]["parts"] == parts
        stored = store.get(task["id"])["history"][0]["parts"]
        assert stored == [
            {
                "kind": "file",
                "file": {
                    "uri": "https://x.test/a.pdf",
                    "mimeType": "application/pdf",
                    "name": "a.pdf",
                },
            },
            {"kind": "file", "file": {"bytes": "aGk=", "mimeType": "text/plain"}},
            {"kind": "data", "data": {"k": [1, 2]}, "metadata": {"why": "test"}},
        ]
        as_0_3 = result_of(rpc(client, "tasks/get", {"id": task["id"]}))
        assert as_0_3["history"][0]["parts"] == stored


@pytest.mark.parametrize(
    ("method", "version"), [("GetTask", None), ("tasks/get", None), ("GetTask", "1.0")]
)
def test_history_length(client: FlaskClient, store: Any, method: str, version: str | None) -> None:
    task = result_of(rpc(client, "SendMessage", {"message": user_message("one")}))
    complete(store, task["id"])
    full = result_of(rpc(client, method, {"id": task["id"]}, version=version))
    assert len(full["history"]) == 2
    none = result_of(rpc(client, method, {"id": task["id"], "historyLength": 0}, version=version))
    assert "history" not in none
    assert none["status"] == full["status"]
    last = result_of(rpc(client, method, {"id": task["id"], "historyLength": 1}, version=version))
    assert last["history"] == full["history"][-1:]
    many = result_of(rpc(client, method, {"id": task["id"], "historyLength": 50}, version=version))
    assert many["history"] == full["history"]


def test_history_length_on_send(auto_client: FlaskClient) -> None:
    params = {"message": user_message(), "configuration": {"historyLength": 1}}
    task = result_of(rpc(auto_client, "message/send", params))
    assert [message["role"] for message in task["history"]] == ["agent"]


@pytest.mark.parametrize(
    ("method", "version"),
    [
        ("GetTask", None),
        ("tasks/get", None),
        ("GetTask", "1.0"),
        ("CancelTask", "1.0"),
        ("tasks/cancel", None),
    ],
)
def test_unknown_task_is_32001(client: FlaskClient, method: str, version: str | None) -> None:
    reply = rpc(client, method, {"id": "no-such-task"}, version=version)
    assert reply["error"]["code"] == -32001


@pytest.mark.parametrize(
    ("method", "version"), [("GetTask", None), ("GetTask", "1.0"), ("tasks/cancel", None)]
)
@pytest.mark.parametrize("task_id", ["../etc/passwd", "a/b", "x" * 300])
def test_an_id_that_names_no_possible_task_is_32602(
    client: FlaskClient, method: str, version: str | None, task_id: str
) -> None:
    error = rpc(client, method, {"id": task_id}, version=version)["error"]
    assert error["code"] == -32602
    assert len(error["message"]) < 200  # the id is quoted, cut short


class TestCancel:
    def test_terminal_task_is_32002_and_stays_terminal(
        self, client: FlaskClient, store: Any, manual: PlayingDispatcher
    ) -> None:
        task = result_of(rpc(client, "SendMessage", {"message": user_message()}))
        complete(store, task["id"])
        attempts = (("CancelTask", None), ("tasks/cancel", None), ("CancelTask", "1.0"))
        for method, version in attempts:
            reply = rpc(client, method, {"id": task["id"]}, version=version)
            assert reply["error"]["code"] == -32002
        assert store.get(task["id"])["status"]["state"] == "completed"
        assert manual.revoked == []

    def test_cancel_wins_over_a_late_worker(self, client: FlaskClient, store: Any) -> None:
        task = result_of(rpc(client, "SendMessage", {"message": user_message()}))
        result_of(rpc(client, "CancelTask", {"id": task["id"]}))
        complete(store, task["id"])  # the late worker's writes are refused
        assert store.get(task["id"])["status"]["state"] == "canceled"

    def test_cancel_of_input_required_task(self, client: FlaskClient, store: Any) -> None:
        task = result_of(rpc(client, "SendMessage", {"message": user_message(ASK)}))
        ask_back(store, task["id"])
        canceled = result_of(rpc(client, "tasks/cancel", {"id": task["id"]}))
        assert canceled["status"]["state"] == "canceled"

    def test_revoke_failure_does_not_undo_the_cancel(self, store: Any) -> None:
        class RevokeFails(PlayingDispatcher):
            def revoke(self, task_id: str) -> None:
                raise ConnectionError("broker gone")

        client = make_client(store, RevokeFails(store, auto=False))
        task = result_of(rpc(client, "SendMessage", {"message": user_message()}))
        assert result_of(rpc(client, "CancelTask", {"id": task["id"]}))["status"]["state"] == (
            "canceled"
        )


class TestContinue:
    def test_follow_up_resumes_an_input_required_task(
        self, client: FlaskClient, store: Any, manual: PlayingDispatcher
    ) -> None:
        task = result_of(rpc(client, "SendMessage", {"message": user_message(ASK)}))
        ask_back(store, task["id"])
        follow_up = user_message("Ada", taskId=task["id"], messageId="m-2")
        resumed = result_of(rpc(client, "SendMessage", {"message": follow_up}))
        assert resumed["id"] == task["id"]
        assert resumed["status"]["state"] == "submitted"
        assert "message" not in resumed["status"]
        roles_and_texts = [(m["role"], m["parts"][0]["text"]) for m in resumed["history"]]
        assert roles_and_texts == [("user", ASK), ("agent", QUESTION), ("user", "Ada")]
        assert resumed["history"][-1]["contextId"] == task["contextId"]
        assert manual.enqueued == [task["id"], task["id"]]
        complete(store, task["id"])
        done = result_of(rpc(client, "GetTask", {"id": task["id"]}))
        assert done["artifacts"][0]["parts"][0]["text"] == "ran: Ada"

    def test_follow_up_in_1_0_with_blocking(self, store: Any) -> None:
        client = make_client(store, PlayingDispatcher(store), blocking_timeout=10)
        first = {"role": "ROLE_USER", "messageId": "a", "parts": [{"text": ASK}]}
        task = result_of(rpc(client, "SendMessage", {"message": first}, version="1.0"))["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        answer = {
            "role": "ROLE_USER",
            "messageId": "b",
            "parts": [{"text": "Ada"}],
            "taskId": task["id"],
            "contextId": task["contextId"],
        }
        done = result_of(rpc(client, "SendMessage", {"message": answer}, version="1.0"))["task"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        assert done["artifacts"][0]["parts"] == [{"text": "ran: Ada"}]

    def test_follow_up_to_a_terminal_task_is_an_error(
        self, client: FlaskClient, store: Any, manual: PlayingDispatcher
    ) -> None:
        task = result_of(rpc(client, "SendMessage", {"message": user_message()}))
        complete(store, task["id"])
        reply = rpc(client, "SendMessage", {"message": user_message(taskId=task["id"])})
        assert reply["error"]["code"] == -32004
        assert "completed" in reply["error"]["message"]
        assert len(store.get(task["id"])["history"]) == 2
        assert manual.enqueued == [task["id"]]

    def test_follow_up_to_a_task_not_waiting_for_input_is_an_error(
        self, client: FlaskClient
    ) -> None:
        task = result_of(rpc(client, "SendMessage", {"message": user_message()}))
        reply = rpc(client, "SendMessage", {"message": user_message(taskId=task["id"])})
        assert reply["error"]["code"] == -32004

    def test_unknown_task_id_is_32001(self, client: FlaskClient, manual: PlayingDispatcher) -> None:
        for version in (None, "1.0"):
            reply = rpc(
                client, "SendMessage", {"message": user_message(taskId="nope")}, version=version
            )
            assert reply["error"]["code"] == -32001
        assert manual.enqueued == []

    def test_follow_up_errors_name_the_task_as_get_and_cancel_do(self, client: FlaskClient) -> None:
        task = result_of(rpc(client, "SendMessage", {"message": user_message()}))
        for task_id, code in ((task["id"], -32004), ("nope", -32001)):
            message = {"message": user_message(taskId=task_id)}
            old = rpc(client, "SendMessage", message)["error"]
            assert (old["code"], old["data"]["taskId"]) == (code, task_id)
            new = rpc(client, "SendMessage", message, version="1.0")["error"]
            (info,) = [d for d in new["data"] if d["@type"].endswith("ErrorInfo")]
            assert (new["code"], info["metadata"]) == (code, {"taskId": task_id})

    def test_mismatched_context_is_rejected(self, client: FlaskClient, store: Any) -> None:
        task = result_of(rpc(client, "SendMessage", {"message": user_message(ASK)}))
        ask_back(store, task["id"])
        stray = user_message(taskId=task["id"], contextId="other-context")
        reply = rpc(client, "SendMessage", {"message": stray})
        assert reply["error"]["code"] == -32602
        assert store.get(task["id"])["status"]["state"] == "input-required"


class TestEnqueueFailure:
    def test_the_task_stays_submitted_for_the_resend_and_the_peer_hears_broker_unavailable(
        self, store: Any
    ) -> None:
        HOOK_CALLS.clear()
        dispatcher = PlayingDispatcher(store, auto=False)
        dispatcher.broken = True
        client = make_client(store, dispatcher, on_task=f"{__name__}:record_hook")
        named = []
        for version in (None, "1.0"):
            reply = rpc(client, "SendMessage", {"message": user_message()}, version=version)
            error = reply["error"]
            assert error["code"] == -32603
            assert error["message"] == "broker unavailable"
            named.append(
                error["data"]["taskId"]
                if version is None
                else (error["data"][0]["metadata"]["taskId"])
            )
        assert {task["status"]["state"] for task in store.all().values()} == {SUBMITTED}
        assert HOOK_CALLS == []  # nothing ended
        # The broker back, beat's resend finds each in the waiting index and queues it.
        dispatcher.broken = False
        resent = resend_waiting(store, dispatcher.enqueue, time.time() + 1, older_than=0)
        assert sorted(resent) == sorted(named) == sorted(dispatcher.enqueued)

    def test_a_continuation_that_cannot_be_queued_stays_submitted_too(self, store: Any) -> None:
        dispatcher = PlayingDispatcher(store, auto=False)
        client = make_client(store, dispatcher)
        task = result_of(rpc(client, "SendMessage", {"message": user_message(ASK)}))
        ask_back(store, task["id"])
        dispatcher.broken = True
        error = rpc(client, "SendMessage", {"message": user_message(taskId=task["id"])})["error"]
        assert error["message"] == "broker unavailable"
        assert store.get(task["id"])["status"]["state"] == SUBMITTED
        assert task["id"] in store.waiting(time.time() + 1)


class TestOnTaskHook:
    def test_cancel_calls_the_hook_once(self, store: Any) -> None:
        HOOK_CALLS.clear()
        client = make_client(
            store, PlayingDispatcher(store, auto=False), on_task=f"{__name__}:record_hook"
        )
        task = result_of(rpc(client, "SendMessage", {"message": user_message()}))
        assert HOOK_CALLS == []
        result_of(rpc(client, "CancelTask", {"id": task["id"]}))
        rpc(client, "CancelTask", {"id": task["id"]})
        calls = list(HOOK_CALLS)
        assert calls == [(task["id"], "canceled")]

    def test_a_hook_that_cannot_be_imported_stops_start_up(self, store: Any) -> None:
        with pytest.raises(ConfigError, match=r"^TOOLNEXUS_ON_TASK: cannot import module"):
            make_client(store, PlayingDispatcher(store), on_task="no_such_module_xyz:hook")

    def test_a_hook_that_raises_is_logged_not_raised(
        self, store: Any, caplog: pytest.LogCaptureFixture
    ) -> None:
        client = make_client(
            store, PlayingDispatcher(store, auto=False), on_task=f"{__name__}:raising_hook"
        )
        task = result_of(rpc(client, "SendMessage", {"message": user_message()}))
        assert result_of(rpc(client, "CancelTask", {"id": task["id"]}))["status"]["state"] == (
            "canceled"
        )
        assert "on_task hook failed" in caplog.text


def test_concurrent_blocking_sends_all_complete(store: Any) -> None:
    app = create_app(
        Settings(blocking_timeout=10), store=store, dispatcher=PlayingDispatcher(store)
    )

    def send(index: int) -> tuple[str, str]:
        reply = rpc(app.test_client(), "message/send", {"message": user_message(f"n{index}")})
        return str(reply["result"]["id"]), str(reply["result"]["status"]["state"])

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(send, range(24)))
    assert [state for _, state in answers] == ["completed"] * 24
    # 24 distinct tasks, each stored completed: none merged, none lost.
    stored = {task_id: state_of(task) for task_id, task in store.all().items()}
    assert stored == dict(answers)
