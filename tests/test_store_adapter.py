"""A user's two-method store, adapted once at wiring: used from outside, as
users use it (a store handed to create_app, or named by TOOLNEXUS_STORE)."""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from shared import Settings
from shared.events import artifact_update, status_update
from shared.store.adapter import Adapted, number_of
from shared.store.contract import Record, Watch
from shared.store.follow import follow
from shared.store.wiring import is_full_store, open_store
from shared.stores.file.store import file_store
from shared.stores.memory.store import memory_store
from shared.task import (
    COMPLETED,
    SUBMITTED,
    WORKING,
    new_task,
    now_iso,
    state_of,
    text_message,
)
from shared.transitions import claim, transition
from tests.support.polling import wait_for
from tests.test_web_support import PlayingDispatcher, rpc, user_message
from web import create_app


class DictStore:
    """The smallest store a user writes: get and save over a dict."""

    def __init__(self) -> None:
        self.tasks: dict[str, Any] = {}
        self.saves = 0

    def get(self, task_id: str) -> Any:
        return copy.deepcopy(self.tasks.get(task_id))

    def save(self, task: Any) -> Any:
        self.tasks[task["id"]] = copy.deepcopy(task)
        self.saves += 1
        return task


def test_the_start_up_line_names_what_a_two_method_store_lacks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="shared.store.adapter")
    store = open_store(Settings(), DictStore())
    assert isinstance(store, Adapted) and is_full_store(store)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "shared.store.adapter"]
    assert "DictStore has only get/save" in line
    for lack in ("no event log", "no stale/waiting index", "last-writer-wins", "no listing"):
        assert lack in line


def test_a_whole_store_is_not_adapted_and_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="shared.store.adapter")
    store = memory_store()
    assert open_store(Settings(), store) is store
    assert not [r for r in caplog.records if r.name == "shared.store.adapter"]


def test_the_state_machine_and_claims_hold_on_an_adapted_store() -> None:
    inner = DictStore()
    store = open_store(Settings(), inner)
    task = store.create(new_task(text_message("user", "hi"))).task
    assert claim(store, task["id"], to=WORKING, from_state=SUBMITTED).applied
    assert not claim(store, task["id"], to=WORKING, from_state=SUBMITTED).applied
    done = transition(store, task["id"], lambda t: [status_update(t, COMPLETED)])
    assert done.applied and state_of(inner.tasks[task["id"]]) == COMPLETED
    # Terminal is final, through the user's own store.
    assert not transition(store, task["id"], lambda t: [status_update(t, WORKING)]).applied
    assert state_of(inner.get(task["id"])) == COMPLETED


def test_numbers_grow_with_each_change_and_a_follower_sees_each_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = open_store(Settings(), DictStore())
    task = store.create(new_task(text_message("user", "hi"))).task
    first = store.read(task["id"])
    assert first is not None and first.seq % 2 == 0
    transition(store, task["id"], lambda t: [status_update(t, WORKING)])
    artifact = {"artifactId": "a", "parts": [{"kind": "text", "text": "x"}]}
    chunk = transition(store, task["id"], lambda t: [artifact_update(t, artifact)])  # type: ignore[arg-type]
    assert chunk.applied
    numbers = [first.seq, store.read(task["id"]).seq]
    assert numbers[1] > numbers[0]

    # A change another thread saves once the follower read all there was and waits.
    waiting = threading.Event()
    watch = store.watch

    @contextmanager
    def announcing(task_id: str) -> Iterator[Any]:
        with watch(task_id) as waiter:
            yield Announcing(waiter, waiting)

    monkeypatch.setattr(store, "watch", announcing)

    def numbered_above_the_last_now() -> bool:
        # The adapter numbers a task by its status time, in centiseconds: a
        # status saved in the centisecond of the one before gets its number,
        # and no follower tells the two apart.
        current = store.get(task["id"])
        assert current is not None
        stamped_now = {**current, "status": {"state": COMPLETED, "timestamp": now_iso()}}
        return number_of(stamped_now) > numbers[1]  # type: ignore[arg-type]

    def finish_once_followed() -> None:
        if waiting.wait(10):  # else nothing is saved, and the follower sees nothing
            wait_for(numbered_above_the_last_now, what="a status time the adapter tells apart")
            transition(store, task["id"], lambda t: [status_update(t, COMPLETED)])

    finisher = threading.Thread(target=finish_once_followed)
    finisher.start()
    seen = list(follow(store, task["id"], numbers[1], deadline=time.monotonic() + 10, idle=20))
    finisher.join()
    assert waiting.is_set(), "the follower never waited"
    assert [state_of(item.task) for item in seen if isinstance(item, Record)] == [COMPLETED]


class Announcing:
    """A waiter that sets `waiting` each time its follower starts a wait."""

    def __init__(self, waiter: Watch, waiting: threading.Event) -> None:
        self._waiter = waiter
        self._waiting = waiting

    def wait(self, timeout: float, after: int | None = None) -> bool:
        self._waiting.set()
        return self._waiter.wait(timeout, after)

    def wake(self) -> None:
        self._waiter.wake()

    def on_wake(self, callback: Callable[[], object]) -> None:
        self._waiter.on_wake(callback)


class CountingStore(DictStore):
    """A DictStore that counts its reads: a poller's look reads each watched task."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    def get(self, task_id: str) -> Any:
        self.gets += 1
        return super().get(task_id)


def test_a_polling_watch_hears_of_a_change_saved_behind_the_adapter() -> None:
    # Another process saving through its own adapter: only the poller can tell.
    inner = CountingStore()
    store = Adapted(inner, poll=0.02)
    task = store.create(new_task(text_message("user", "hi"))).task
    number = number_of(inner.get(task["id"]))
    with store.watch(task["id"]) as watch:
        # Two looks of the poller begun since the watch did: the first one
        # ended, and found nothing to wake the watch for.
        looked = inner.gets
        wait_for(lambda: inner.gets >= looked + 2, what="two looks of the poller")
        assert not watch.wait(0), "woken with nothing changed"
        inner.save(
            {
                **inner.get(task["id"]),
                "status": {"state": WORKING, "timestamp": "2100-01-01T00:00:00Z"},
            }
        )
        assert watch.wait(5, number)


def test_the_service_runs_on_a_two_method_store() -> None:
    inner = DictStore()
    store = open_store(Settings(), inner)
    client = create_app(Settings(), store=inner, dispatcher=PlayingDispatcher(store)).test_client()
    params = {"message": user_message(), "configuration": {"blocking": True}}
    sent = rpc(client, "SendMessage", params)["result"]
    assert sent["status"]["state"] == "completed"  # a blocking send waited, polling
    assert rpc(client, "GetTask", {"id": sent["id"]})["result"]["id"] == sent["id"]
    task = sent
    assert task["id"] in inner.tasks
    listed = rpc(client, "ListTasks", {}, version="1.0")["error"]
    assert listed["code"] == -32004
    assert client.get("/readyz").status_code == 200


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_claims_on_memory_and_file_go_through_the_stores_claim(
    kind: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = memory_store() if kind == "memory" else file_store(tmp_path / "tasks")
    calls: list[str] = []
    own = store.claim

    def counted(task_id: str, from_state: str, event: Any) -> Any:
        calls.append(task_id)
        return own(task_id, from_state, event)

    monkeypatch.setattr(store, "claim", counted)
    task = store.create(new_task(text_message("user", "hi"))).task
    outcome = claim(store, task["id"], to=WORKING, from_state=SUBMITTED)
    assert outcome.applied and calls == [task["id"]]
    assert outcome.record is not None and outcome.record.seq == 2
    assert store.events(task["id"], 1)[0][1]["contextId"] == task["contextId"]


def test_an_adapted_store_closes_the_users_store_where_it_can() -> None:
    """The user's own `close`, found at wiring, is what the adapter's close calls."""
    closed: list[bool] = []

    class Closing:
        def __init__(self) -> None:
            self.tasks: dict[str, Any] = {}

        def get(self, task_id: str) -> Any:
            return self.tasks.get(task_id)

        def save(self, task: Any) -> Any:
            self.tasks[task["id"]] = task
            return task

        def close(self) -> None:
            closed.append(True)

    class Plain(Closing):
        close = None  # type: ignore[assignment]  # no close of its own

    open_store(Settings(), Closing()).close()
    open_store(Settings(), Plain()).close()  # nothing to call, and no error
    assert closed == [True]
