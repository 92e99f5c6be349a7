"""What a run is given to continue: the context's earlier exchange
(`conversation`) and, answering its own question, the checkpoint it saved
when it asked (`checkpoint`), on every store kind."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from shared.dialects import VERSIONS, task_for
from shared.events import message_added, status_update
from shared.settings import Settings
from shared.store.contract import Store
from shared.task import (
    COMPLETED,
    INPUT_REQUIRED,
    SUBMITTED,
    new_task,
    text_message,
)
from shared.transitions import transition
from tests.support.store_kinds import Stores
from toolnexus import Ask, Checkpoint, Chunk, Done
from worker.engine.agent import Agent
from worker.engine.fulfil import fulfil

SETTINGS = Settings(heartbeat=0.05)


def texts(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    return [
        f"{m['role']}: {part.get('text', part.get('data'))}"
        for m in messages
        for part in m["parts"]
    ]


def sent(store: Store, text: str, context: str, owner: str = "alice") -> str:
    task = new_task(text_message("user", text), context, owner)
    store.create(task)
    return str(task["id"])


def answered(store: Store, task_id: str, text: str) -> None:
    """What the front end does with a follow-up message to a waiting task."""
    answer = text_message("user", text, taskId=task_id)
    assert transition(
        store, task_id, lambda t: [message_added(t, answer), status_update(t, SUBMITTED)]
    ).applied


def test_a_follow_up_task_is_given_its_contexts_earlier_exchange(
    store_kind: str, stores: Stores
) -> None:
    store = stores.open(store_kind)
    seen: list[list[str]] = []

    def remembers(text: str, conversation: list[dict[str, Any]]) -> Done | str:
        seen.append(texts(conversation))
        if text == "streamed":  # a result in an artifact only, no closing words
            return Done(artifacts=[])
        return f"answer to {text}"

    agent = Agent(run=remembers)
    first = sent(store, "one", "ctx")
    assert fulfil(store, first, agent, SETTINGS) == COMPLETED
    sent(store, "elsewhere", "other")  # another context: not part of it
    second = sent(store, "two", "ctx")
    assert fulfil(store, second, agent, SETTINGS) == COMPLETED

    assert seen == [[], ["user: one", "agent: answer to one"]]


def test_a_result_without_closing_words_is_the_agents_answer(
    store_kind: str, stores: Stores
) -> None:
    store = stores.open(store_kind)
    seen: list[list[str]] = []

    def remembers(text: str, conversation: list[dict[str, Any]]) -> Iterator[object]:
        seen.append(texts(conversation))
        yield Chunk(f"streamed {text}", artifact="result", last=True)
        return Done()

    agent = Agent(run=remembers)
    assert fulfil(store, sent(store, "one", "ctx"), agent, SETTINGS) == COMPLETED
    assert fulfil(store, sent(store, "two", "ctx"), agent, SETTINGS) == COMPLETED

    assert seen[1] == ["user: one", "agent: streamed one"]


def asks_then_resumes(text: str, checkpoint: Any) -> Iterator[object]:
    """Asks twice, saving how far it got each time; then answers."""
    if checkpoint is None:
        yield Checkpoint({"asked": 1, "first": text})
        return Ask("and then?")
    if checkpoint["asked"] == 1:
        yield Checkpoint({"asked": 2, "first": checkpoint["first"], "second": text})
        return Ask("and finally?")
    return f"{checkpoint['first']} {checkpoint['second']} {text}"


def test_the_answer_to_a_question_resumes_from_the_checkpoint_saved_with_it(
    store_kind: str, stores: Stores
) -> None:
    store = stores.open(store_kind)
    agent = Agent(run=asks_then_resumes)
    task_id = sent(store, "a", "ctx")
    assert fulfil(store, task_id, agent, SETTINGS) == INPUT_REQUIRED
    answered(store, task_id, "b")
    assert fulfil(store, task_id, agent, SETTINGS) == INPUT_REQUIRED
    answered(store, task_id, "c")
    assert fulfil(store, task_id, agent, SETTINGS) == COMPLETED

    task = store.get(task_id)
    assert task is not None
    assert task["artifacts"][-1]["parts"][0]["text"] == "a b c"


def test_a_question_asked_without_a_checkpoint_resumes_from_none(
    store_kind: str, stores: Stores
) -> None:
    store = stores.open(store_kind)
    given: list[Any] = []

    def asks(text: str, checkpoint: Any) -> Iterator[object]:
        given.append(checkpoint)
        if text == "a":
            yield Checkpoint("saved at a")
            return Ask("b?")
        if text == "b":
            return Ask("c?")  # no checkpoint this turn: the next answer starts afresh
        return "done"

    agent = Agent(run=asks)
    task_id = sent(store, "a", "ctx")
    assert fulfil(store, task_id, agent, SETTINGS) == INPUT_REQUIRED
    answered(store, task_id, "b")
    assert fulfil(store, task_id, agent, SETTINGS) == INPUT_REQUIRED
    answered(store, task_id, "c")
    assert fulfil(store, task_id, agent, SETTINGS) == COMPLETED

    assert given == [None, "saved at a", None]


def test_the_checkpoint_saved_with_a_question_is_never_shown_to_a_peer(
    stores: Stores,
) -> None:
    store = stores.open("memory")
    task_id = sent(store, "a", "ctx")
    assert fulfil(store, task_id, Agent(run=asks_then_resumes), SETTINGS) == INPUT_REQUIRED
    task = store.get(task_id)
    assert task is not None
    assert "run" in task
    for version in VERSIONS:
        assert "first" not in str(task_for(version, task)), version
