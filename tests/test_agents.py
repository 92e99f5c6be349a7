"""The agent contract: every input an agent can ask for and every result,
progress item and kind of function it can use, through the fulfilment core
(the code Celery workers and the embedded server both run)."""

from __future__ import annotations

import asyncio
import base64
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from examples import agents
from shared.events import to_state
from shared.settings import Settings
from shared.stores.memory.store import memory_store
from shared.task import Message, Task, new_task, state_of, text_message
from shared.transitions import transition
from tests.support.polling import wait_for
from tests.support.recording_store import RecordingStore
from toolnexus import Artifact, Ask, Chunk, Data, Done, File, NeedAuth, Progress, Reject, Reply
from worker.engine.agent import Agent
from worker.engine.fulfil import fulfil

SETTINGS = Settings(heartbeat=0.05, stale_after=5, time_limit=7)


@pytest.fixture
def store() -> RecordingStore:
    return RecordingStore(memory_store())


def submit(store: Any, *parts: dict[str, Any]) -> str:
    message = text_message("user", "")
    message["parts"] = list(parts) or [{"kind": "text", "text": "hello"}]  # type: ignore[typeddict-item]
    return store.create(new_task(message)).task["id"]  # type: ignore[no-any-return]


def run(store: Any, function: Any, *parts: dict[str, Any]) -> Task:
    task_id = submit(store, *parts)
    fulfil(store, task_id, Agent(function), SETTINGS)
    task = store.get(task_id)
    assert task is not None
    return task


def text_of(message: dict[str, Any]) -> str:
    return str(message["parts"][0]["text"])


# --- inputs ----------------------------------------------------------------------

FILE_PART = {
    "kind": "file",
    "file": {"bytes": "aGVsbG8=", "name": "a.txt", "mimeType": "text/plain"},
}
DATA_PART = {"kind": "data", "data": {"k": [1, 2]}}


def test_text_is_the_text_parts_and_a_line_for_each_other_part(store: RecordingStore) -> None:
    seen: list[str] = []
    run(store, seen.append, {"kind": "text", "text": "look:"}, FILE_PART, DATA_PART)
    assert seen == ['look:\n[file a.txt, text/plain, 5 bytes]\n{"k":[1,2]}']


def test_message_gives_every_part(store: RecordingStore) -> None:
    task = run(store, agents.describe_parts, {"kind": "text", "text": "hi"}, FILE_PART, DATA_PART)
    assert task["status"]["message"]["parts"][0]["text"] == (
        'text: hi\nfile: a.txt (text/plain, 5 bytes)\ndata: {"k": [1, 2]}'
    )


def test_inputs_are_chosen_by_parameter_name(store: RecordingStore) -> None:
    got: dict[str, Any] = {}

    def wants_all(task: Task, message: Message, text: str) -> str:
        got.update(task=task, message=message, text=text)
        return "ok"

    task = run(store, wants_all)
    assert got["text"] == "hello"
    assert got["message"]["messageId"] == task["history"][0]["messageId"]
    assert got["task"]["id"] == task["id"] and state_of(got["task"]) == "working"


# --- results -----------------------------------------------------------------------


def test_a_string_completes_with_a_result_artifact_and_the_reply(store: RecordingStore) -> None:
    task = run(store, agents.echo)
    assert state_of(task) == "completed"
    assert task["artifacts"][0]["name"] == "result"
    assert task["artifacts"][0]["parts"] == [{"kind": "text", "text": "ran: hello"}]
    assert text_of(task["status"]["message"]) == "ran: hello"
    assert task["history"][-1] == task["status"]["message"]


def test_artifacts_with_file_and_data_parts(store: RecordingStore) -> None:
    task = run(store, agents.report, {"kind": "text", "text": "two words"})
    assert state_of(task) == "completed"
    shouted, counted = task["artifacts"]
    assert shouted["name"] == "shouted"
    assert shouted["parts"] == [
        {
            "kind": "file",
            "file": {
                "bytes": base64.b64encode(b"TWO WORDS").decode(),
                "name": "shout.txt",
                "mimeType": "text/plain",
            },
        }
    ]
    assert counted["parts"] == [{"kind": "data", "data": {"words": 2, "longest": "words"}}]
    assert text_of(task["status"]["message"]) == "Here is your report."


@pytest.mark.parametrize(
    ("result", "parts"),
    [
        (Artifact("plain"), [{"kind": "text", "text": "plain"}]),
        (
            File(url="https://x.test/f.pdf", name="f.pdf"),
            [{"kind": "file", "file": {"uri": "https://x.test/f.pdf", "name": "f.pdf"}}],
        ),
        (Data([1, "two"]), [{"kind": "data", "data": [1, "two"]}]),
        ([Artifact("a"), Artifact("b")], [{"kind": "text", "text": "a"}]),
    ],
)
def test_artifacts_files_and_data_can_be_returned_alone(
    store: RecordingStore, result: Any, parts: list[Any]
) -> None:
    task = run(store, lambda text: result)
    assert state_of(task) == "completed"
    assert task["artifacts"][0]["parts"] == parts
    assert "message" not in task["status"]


def test_an_artifact_keeps_its_name_description_and_metadata(store: RecordingStore) -> None:
    artifact = Artifact("x", name="n", description="d", metadata={"m": 1})
    task = run(store, lambda text: Done(artifacts=[artifact]))
    stored = task["artifacts"][0]
    assert (stored["name"], stored["description"], stored["metadata"]) == ("n", "d", {"m": 1})


@pytest.mark.parametrize(
    ("result", "state"),
    [
        (Ask("which city?"), "input-required"),
        (NeedAuth("sign in at https://x.test/login"), "auth-required"),
        (Reject("not my job"), "rejected"),
        ({"status": "pending", "text": "which city?"}, "input-required"),
    ],
)
def test_stopping_results(store: RecordingStore, result: Any, state: str) -> None:
    task = run(store, lambda text: result)
    assert state_of(task) == state
    message = task["status"]["message"]
    assert message["role"] == "agent" and message["parts"][0]["kind"] == "text"
    assert task["history"][-1] == message


def test_auth_required_is_continued_like_input_required(store: RecordingStore) -> None:
    calls: list[str] = []

    def needs_login(text: str) -> Any:
        calls.append(text)
        return NeedAuth("sign in first") if len(calls) == 1 else f"welcome back, {text}"

    task = run(store, needs_login)
    follow_up = text_message("user", "Ada")
    resumed = transition(store, task["id"], lambda t: [follow_up, *to_state("submitted")(t)])  # type: ignore[list-item]
    assert resumed.applied
    fulfil(store, task["id"], Agent(needs_login), SETTINGS)
    done = store.get(task["id"])
    assert done is not None and state_of(done) == "completed"
    assert store.states(task["id"])[-3:] == ["submitted", "working", "completed"]


def test_a_reply_is_recorded_as_the_agents_message_of_a_completed_task(
    store: RecordingStore,
) -> None:
    task = run(store, agents.answer)
    assert state_of(task) == "completed"
    assert text_of(task["history"][-1]) == "You said 5 characters."
    assert "artifacts" not in task
    assert task["history"][-1]["role"] == "agent"


@pytest.mark.parametrize(
    "result", [None, 42, {"answer": 1}, {"status": "odd", "text": 1}, [1], Artifact([])]
)
def test_anything_else_fails_the_task_saying_what_came_back(
    store: RecordingStore, result: Any
) -> None:
    task = run(store, lambda text: result)
    assert state_of(task) == "failed"
    reason = text_of(task["status"]["message"])
    assert "returned" in reason or "part" in reason


# --- async and generator functions ----------------------------------------------------


def test_an_async_function(store: RecordingStore) -> None:
    task = run(store, agents.weather, {"kind": "text", "text": "Oslo"})
    assert text_of(task["status"]["message"]) == "Sunny in Oslo."


def test_an_async_function_that_raises_fails_the_task(store: RecordingStore) -> None:
    async def broken(text: str) -> str:
        await asyncio.sleep(0)
        raise ValueError("nope")

    task = run(store, broken)
    assert text_of(task["status"]["message"]) == "ValueError: nope"


def test_an_async_generator_streams_progress_and_chunks_then_finishes(
    store: RecordingStore,
) -> None:
    task = run(store, agents.countdown, {"kind": "text", "text": "3"})
    assert state_of(task) == "completed"
    (artifact,) = task["artifacts"]
    assert artifact["name"] == "countdown"
    assert [p["text"] for p in artifact["parts"]] == ["3... ", "2... ", "1... ", "liftoff!"]  # type: ignore[typeddict-item]
    assert [text_of(m) for m in task["history"] if m["role"] == "agent"] == [
        "counting down from 3",
        "Counted down.",
    ]
    # Each yield was its own saved change, working -> working, as it happened.
    assert store.states(task["id"]) == ["submitted", "working", *["working"] * 5, "completed"]


def test_a_sync_generator_returns_its_result(store: RecordingStore) -> None:
    def steps(text: str) -> Iterator[Any]:
        yield "step one"
        yield Artifact("partial", name="draft")
        return "all done"

    task = run(store, steps)
    assert state_of(task) == "completed"
    assert [a.get("name") for a in task["artifacts"]] == ["draft", "result"]
    assert text_of(task["status"]["message"]) == "all done"


def test_a_generator_ending_without_a_result_completes_with_what_it_yielded(
    store: RecordingStore,
) -> None:
    async def only_artifacts(text: str) -> AsyncIterator[Any]:
        yield Artifact("one")
        yield Artifact("two")

    task = run(store, only_artifacts)
    assert state_of(task) == "completed"
    assert len(task["artifacts"]) == 2


def test_a_generator_may_stop_for_input_or_reply(store: RecordingStore) -> None:
    def asks(text: str) -> Iterator[Any]:
        yield Progress("thinking")
        yield Ask("which one?")
        raise AssertionError("never resumed after a final result")

    assert state_of(run(store, asks)) == "input-required"

    async def replies(text: str) -> AsyncIterator[Any]:
        yield Progress("thinking")
        yield Reply("just this")

    task = run(store, replies)
    assert state_of(task) == "completed" and text_of(task["history"][-1]) == "just this"


def test_yielding_something_unsupported_fails_the_task(store: RecordingStore) -> None:
    def odd(text: str) -> Iterator[Any]:
        yield 42

    task = run(store, odd)
    assert state_of(task) == "failed"
    assert "yielded 42" in text_of(task["status"]["message"])


def test_progress_is_visible_while_the_task_runs(store: RecordingStore) -> None:
    release = threading.Event()

    def long(text: str) -> Iterator[Any]:
        yield Chunk("first half ", artifact="essay")
        release.wait(10)
        yield Chunk("second half", artifact="essay", last=True)

    task_id = submit(store)
    runner = threading.Thread(target=fulfil, args=(store, task_id, Agent(long), SETTINGS))
    runner.start()

    def partial() -> Task | None:
        task = store.get(task_id)
        return task if task and task.get("artifacts") else None

    seen = wait_for(partial, what="the first chunk to be saved")
    assert state_of(seen) == "working"
    assert seen["artifacts"][0]["parts"] == [{"kind": "text", "text": "first half "}]
    release.set()
    runner.join(10)
    done = store.get(task_id)
    assert done is not None
    assert [p["text"] for p in done["artifacts"][0]["parts"]] == ["first half ", "second half"]  # type: ignore[typeddict-item]


def test_a_canceled_generator_stops_at_its_next_yield(store: RecordingStore) -> None:
    yielded: list[int] = []
    closed = threading.Event()

    def endless(text: str) -> Iterator[Any]:
        n = 0
        try:
            while True:
                n += 1
                yielded.append(n)
                yield Progress(f"tick {n}")
                time.sleep(0.01)
        finally:
            closed.set()  # GeneratorExit at a yield, or its end

    task_id = submit(store)
    runner = threading.Thread(
        target=fulfil, args=(store, task_id, Agent(endless), SETTINGS), daemon=True
    )
    runner.start()
    wait_for(lambda: len(yielded) >= 3, what="a few ticks")
    assert transition(store, task_id, to_state("canceled")).applied
    # Counted once the cancel is saved: the generator may still be in the
    # yield whose save the cancel refuses, or between two yields, when the
    # next one is refused. Either way it yields at most once more.
    at_cancel = len(yielded)
    runner.join(10)
    assert not runner.is_alive()
    assert len(yielded) <= at_cancel + 1, (at_cancel, len(yielded))
    assert closed.is_set()  # closed at that yield: it never runs again
    final = store.get(task_id)
    assert final is not None and state_of(final) == "canceled"


def test_a_thousand_chunks_cost_appends_not_rewrites(store: RecordingStore) -> None:
    """Each chunk is one small commit; the whole task is written only once
    every few dozen events (the snapshot), not once per chunk."""

    def chatty(text: str) -> Iterator[Any]:
        for n in range(1000):
            yield Chunk(f"{n} ", artifact="tokens", last=n == 999)

    task = run(store, chatty)
    assert len(task["artifacts"][0]["parts"]) == 1000
    commits = store.commits[task["id"]]
    snapshots = [commit for commit in commits if commit.snapshot]
    assert len(commits) == 1002  # claim, 1000 chunks, completion
    assert len(snapshots) <= len(commits) // 20


def test_run_finds_a_module_in_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "myagent.py").write_text("def run(text):\n    return 'mine: ' + text\n")
    probe = (
        "import sys; from worker.embedded import main;"
        " sys.exit(main(['--run', 'myagent:run', '--port', '1', '--host', '256.0.0.1']))"
    )
    # The address is refused after the agent loaded: loading is what is tested.
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    assert "cannot import module 'myagent'" not in done.stderr
    assert done.returncode == 2 and "256.0.0.1" in done.stderr, done.stderr
