"""Streams over real HTTP, served in one process: the front end and the
fulfilment core running real example agents on threads (the embedded
composition), so each event is what a worker really saved."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from shared import Settings
from shared.stores.memory.store import MemoryStore, memory_store
from tests.support.a2a import call
from tests.support.agents import gate
from tests.support.polling import wait_for
from tests.support.sse import Stream, results
from tests.test_web_support import live_server
from web import create_app
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher

Serve = Callable[..., tuple[str, MemoryStore]]


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Serve the app with an in-process worker running `run`, over HTTP."""
    stops: list[Callable[[], None]] = []

    def start(run: str, **settings: Any) -> tuple[str, MemoryStore]:
        config = Settings(run=run, keepalive=settings.pop("keepalive", 15.0), **settings)
        store = memory_store()
        dispatcher = InProcessDispatcher(store, load_agent(config), config, threads=4)
        app = create_app(config, store=store, dispatcher=dispatcher)
        served = live_server(app)
        url, _ = served.__enter__()
        stops.append(lambda: (served.__exit__(None, None, None), dispatcher.close(timeout=5)))
        return url, store

    yield start
    for stop in stops:
        stop()


def user(text: str, **extra: Any) -> dict[str, Any]:
    message = {"role": "ROLE_USER", "messageId": str(uuid.uuid4()), "parts": [{"text": text}]}
    return {**message, **extra}


def started(url: str, text: str) -> str:
    """Send without waiting (the toolnexus dialect); the new task's id."""
    reply = call(url, "SendMessage", {"message": user(text)})
    return str(reply["result"]["id"])


def kinds(payloads: list[dict[str, Any]]) -> list[str]:
    """The 1.0 stream response kind of each payload, with the state for status updates."""
    shown = []
    for payload in payloads:
        (kind, body), *_ = payload.items()
        state = body["status"]["state"] if kind in ("task", "statusUpdate") else ""
        shown.append(f"{kind} {state}".strip())
    return shown


def test_a_send_stream_is_the_task_then_every_event_in_order(serve: Serve) -> None:
    url, store = serve("examples.agents:countdown")
    stream = Stream(url, "SendStreamingMessage", {"message": user("2")})
    assert stream.is_stream
    assert stream.response.headers["Cache-Control"] == "no-store"
    events = list(stream)  # ends by itself: the stream closes after the terminal state
    payloads = results(events)
    assert kinds(payloads) == [
        "task TASK_STATE_SUBMITTED",
        "statusUpdate TASK_STATE_WORKING",
        "statusUpdate TASK_STATE_WORKING",  # the agent's progress message
        "artifactUpdate",
        "artifactUpdate",
        "artifactUpdate",
        "statusUpdate TASK_STATE_COMPLETED",
    ]
    assert [event.id for event in events] == list(range(1, 8))  # the task's own event numbers
    chunks = [p["artifactUpdate"] for p in payloads if "artifactUpdate" in p]
    assert [c["artifact"]["parts"][0]["text"] for c in chunks] == ["2... ", "1... ", "liftoff!"]
    assert [(c["append"], c["lastChunk"]) for c in chunks] == [
        (False, False),
        (True, False),
        (True, True),
    ]
    assert len({c["artifact"]["artifactId"] for c in chunks}) == 1
    progress = payloads[2]["statusUpdate"]["status"]["message"]
    assert progress["parts"] == [{"text": "counting down from 2"}]
    assert all("kind" not in body and "final" not in body for p in payloads for body in p.values())
    # What was streamed is what was saved.
    task_id = payloads[0]["task"]["id"]
    saved = store.get(task_id)
    assert saved is not None and saved["artifacts"][0]["parts"] == [
        {"kind": "text", "text": text} for text in ("2... ", "1... ", "liftoff!")
    ]


def test_0_3_streams_carry_kind_and_final(serve: Serve) -> None:
    url, _ = serve("examples.agents:echo")
    message = {"kind": "message", "role": "user", "messageId": str(uuid.uuid4())}
    message["parts"] = [{"kind": "text", "text": "hi"}]
    payloads = results(list(Stream(url, "message/stream", {"message": message}, version=None)))
    assert [p["kind"] for p in payloads] == [
        "task",
        "status-update",
        "artifact-update",
        "status-update",
    ]
    assert [p.get("final") for p in payloads if p["kind"] == "status-update"] == [False, True]
    assert payloads[-1]["status"]["state"] == "completed"


def test_a_message_reply_is_the_one_event_of_its_stream(serve: Serve) -> None:
    url, _ = serve("examples.agents:answer")
    payloads = results(list(Stream(url, "SendStreamingMessage", {"message": user("abc")})))
    assert len(payloads) == 1
    reply = payloads[0]["message"]
    assert reply["role"] == "ROLE_AGENT"
    assert reply["parts"] == [{"text": "You said 3 characters."}]


def test_a_stream_stops_when_the_task_waits_for_input_and_a_follow_up_streams_on(
    serve: Serve,
) -> None:
    url, _ = serve("examples.agents:ask_back")
    first = results(list(Stream(url, "SendStreamingMessage", {"message": user("hi")})))
    assert kinds(first)[-1] == "statusUpdate TASK_STATE_INPUT_REQUIRED"
    task = first[0]["task"]
    follow_up = user("Ada", taskId=task["id"])
    second = results(list(Stream(url, "SendStreamingMessage", {"message": follow_up})))
    assert kinds(second)[0] == "task TASK_STATE_SUBMITTED"
    assert second[0]["task"]["history"][-1]["parts"] == [{"text": "Ada"}]
    assert kinds(second)[-1] == "statusUpdate TASK_STATE_COMPLETED"
    # A 1.0 peer reads the text answer once: in the result artifact, not
    # again as the completed status's message (tests/test_clients_answer_once.py).
    assert "message" not in second[-1]["statusUpdate"]["status"]
    (answer,) = [p["artifactUpdate"]["artifact"] for p in second if "artifactUpdate" in p]
    assert answer["parts"] == [{"text": "Hello, Ada!"}]


def test_subscribing_gives_the_task_as_it_stands_then_live_events(serve: Serve) -> None:
    url, _ = serve("examples.agents:countdown")
    task_id = started(url, "0.3 3")
    events = list(Stream(url, "SubscribeToTask", {"id": task_id}))
    payloads = results(events)
    assert "task" in payloads[0]
    assert kinds(payloads)[-1] == "statusUpdate TASK_STATE_COMPLETED"
    assert [e.id for e in events] == list(range(events[0].id or 0, events[-1].id + 1))  # type: ignore[operator]


def finished_task(url: str) -> dict[str, Any]:
    """A task sent and seen completed: the toolnexus dialect's send answers
    before the work, so a test that needs the task finished waits for it."""
    sent = call(url, "SendMessage", {"message": user("x")})["result"]
    wait_for(
        lambda: (
            call(url, "GetTask", {"id": sent["id"]})["result"]["status"]["state"] == "completed"
        ),
        what="the task to finish",
    )
    return dict(sent)


def test_subscribing_to_a_finished_or_unknown_task_is_a_plain_error(serve: Serve) -> None:
    url, _ = serve("examples.agents:echo")
    done = finished_task(url)
    finished = Stream(url, "SubscribeToTask", {"id": done["id"]}, version=None)
    assert not finished.is_stream
    assert finished.json()["error"]["code"] == -32004
    unknown = Stream(url, "SubscribeToTask", {"id": "no-such-task"})
    assert not unknown.is_stream
    assert unknown.json()["error"]["code"] == -32001


def test_0_3_streaming_methods_refused_by_the_method_answer_a_stream_of_that_error(
    serve: Serve,
) -> None:
    # Spec 0.3 §3.3.1: message/stream and tasks/resubscribe are answered "HTTP 200 OK" with
    # "text/event-stream", each event a SendStreamingMessageResponse (success or error);
    # the 0.3 SDK's client (httpx-sse) refuses any other content type.
    url, _ = serve("examples.agents:echo")
    done = finished_task(url)
    message = {"kind": "message", "role": "user", "messageId": str(uuid.uuid4())}
    follow_up = {**message, "parts": [{"kind": "text", "text": "again"}], "taskId": "no-such"}
    for method, params, code in (
        ("tasks/resubscribe", {"id": "no-such-task"}, -32001),
        ("tasks/resubscribe", {"id": done["id"]}, -32004),
        ("message/stream", {"message": follow_up}, -32001),
    ):
        stream = Stream(url, method, params, version=None)
        assert stream.response.status_code == 200 and stream.is_stream, (method, params)
        events = list(stream)
        assert [e.data["error"]["code"] for e in events] == [code], events
        assert events[0].data["id"] is not None and "result" not in events[0].data
    # A malformed request is still a plain JSON error, as is every 1.0 refusal.
    malformed = Stream(url, "tasks/resubscribe", {}, version=None)
    assert not malformed.is_stream and malformed.json()["error"]["code"] == -32602
    unknown = Stream(url, "SubscribeToTask", {"id": "no-such-task"}, version="1.0")
    assert not unknown.is_stream and unknown.json()["error"]["code"] == -32001


def test_a_reconnect_with_last_event_id_gets_exactly_the_missed_events(serve: Serve) -> None:
    url, _ = serve("examples.agents:countdown")
    message = user("0.2 4")
    first = Stream(url, "SendStreamingMessage", {"message": message})
    seen = []
    for event in first:
        seen.append(event)
        if len(seen) == 3:
            break
    first.close()  # the connection drops after event 3
    # The client sends the same message again (same messageId) with Last-Event-ID.
    rest = list(Stream(url, "SendStreamingMessage", {"message": message}, last_event_id=3))
    ids = [event.id for event in seen + rest]
    assert ids == list(range(1, len(ids) + 1))  # no gap, no duplicate
    assert kinds(results(rest))[-1] == "statusUpdate TASK_STATE_COMPLETED"
    # A subscriber resuming after the end gets the missed tail, then the stream closes.
    task_id = results(seen)[0]["task"]["id"]
    tail = list(Stream(url, "SubscribeToTask", {"id": task_id}, last_event_id=ids[-3]))
    assert [event.id for event in tail] == ids[-2:]


def test_a_repeated_send_stream_is_the_task_as_it_stands_never_a_replay(serve: Serve) -> None:
    # A client that lost the first stream's reply sends the same message again.
    url, _ = serve("examples.agents:countdown")
    message = user("2")
    first = results(list(Stream(url, "SendStreamingMessage", {"message": message})))
    again = list(Stream(url, "SendStreamingMessage", {"message": message}))
    assert kinds(results(again)) == ["task TASK_STATE_COMPLETED"]  # and closed: it is done
    assert results(again)[0]["task"]["id"] == first[0]["task"]["id"]
    assert again[0].id == max(event.id or 0 for event in again)  # the latest event's number
    # A task waiting for the peer: the Task alone as well, the stream does not hang.
    url, _ = serve("examples.agents:ask_back")
    asking = user("hi")
    list(Stream(url, "SendStreamingMessage", {"message": asking}))
    waiting = results(list(Stream(url, "SendStreamingMessage", {"message": asking}, timeout=5)))
    assert kinds(waiting) == ["task TASK_STATE_INPUT_REQUIRED"]


def test_resuming_at_the_latest_event_of_a_live_task_gets_what_comes_next(serve: Serve) -> None:
    url, _ = serve("examples.agents:ticking")
    task_id = started(url, "3 ticks")
    first = Stream(url, "SubscribeToTask", {"id": task_id})
    events = iter(first)
    snapshot = next(events)
    first.close()
    resumed = list(Stream(url, "SubscribeToTask", {"id": task_id}, last_event_id=snapshot.id))
    assert "task" not in results(resumed)[0]  # it has the task: only what came after it
    assert resumed[0].id == (snapshot.id or 0) + 1
    assert kinds(results(resumed))[-1] == "statusUpdate TASK_STATE_COMPLETED"


def test_last_event_id_concerns_streams_only(serve: Serve) -> None:
    url, _ = serve("examples.agents:echo")
    done = call(url, "SendMessage", {"message": user("x")})["result"]
    reply = requests.post(
        f"{url}/",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": done["id"]}},
        headers={"Last-Event-ID": "not-a-number"},
        timeout=10,
    ).json()
    assert reply["result"]["id"] == done["id"]
    bad = Stream(url, "SubscribeToTask", {"id": done["id"]}, last_event_id=-5)
    assert bad.json()["error"]["code"] == -32600


def test_many_subscribers_see_the_same_events_and_one_leaving_disturbs_none(
    serve: Serve,
) -> None:
    url, store = serve("tests.support.agents:gated")
    name = f"subscribers-{uuid.uuid4()}"
    entered, opened = gate(name)
    try:
        task_id = started(url, f"{name} 4")
        # The agent is running (claimed, working) and emits nothing until the
        # gate opens: every subscriber then finds the task as the same Task.
        assert entered.wait(60), "the agent never started"
        streams = [Stream(url, "SubscribeToTask", {"id": task_id}) for _ in range(4)]
        collected: list[list[Any]] = [[] for _ in streams]
        subscribed = threading.Semaphore(0)

        def read(index: int) -> None:
            for event in streams[index]:
                collected[index].append((event.id, event.data["result"]))
                if len(collected[index]) == 1:
                    subscribed.release()
                if index == 0 and len(collected[0]) == 2:
                    streams[0].close()
                    return

        readers = [threading.Thread(target=read, args=(n,)) for n in range(len(streams))]
        for reader in readers:
            reader.start()
        for _ in streams:
            assert subscribed.acquire(timeout=60), "a subscriber never got the task"
        opened.set()
        for reader in readers:
            reader.join(60)
    finally:
        opened.set()
    full = [events for events in collected[1:]]
    assert kinds([p for _, p in full[0]]) == [
        "task TASK_STATE_WORKING",
        *["statusUpdate TASK_STATE_WORKING"] * 4,
        "artifactUpdate",
        "statusUpdate TASK_STATE_COMPLETED",
    ]
    assert full[0] == full[1] == full[2]
    assert collected[0] == full[0][:2]  # the one that left saw the same, then went
    # Everything a subscriber kept is let go once it is gone.
    wait_for(lambda: len(store._notifier) == 0, timeout=60, what="every watch released")


def test_a_client_that_hangs_up_is_let_go_at_once(serve: Serve) -> None:
    # No event comes (the agent waits at its gate) and no keepalive is due
    # for ten minutes: only noticing the hang-up itself lets the watch go.
    url, store = serve("tests.support.agents:gated", keepalive=600.0)
    name = f"hangup-{uuid.uuid4()}"
    entered, opened = gate(name)
    try:
        task_id = started(url, f"{name} 1")
        assert entered.wait(60), "the agent never started"
        stream = Stream(url, "SubscribeToTask", {"id": task_id})
        # Kept: a dropped iterator is closed when collected, and closing urllib3's
        # chunked reader closes the connection, a hang-up of its own.
        events = iter(stream)
        next(events)  # the task: the stream is open, and about to wait
        wait_for(lambda: len(store._notifier) == 1, timeout=60, what="the stream's watch")
        stream.close()
        wait_for(lambda: len(store._notifier) == 0, timeout=60, what="the hung-up stream's watch")
        call(url, "CancelTask", {"id": task_id})
    finally:
        opened.set()


def test_an_idle_stream_gets_keepalive_comments(serve: Serve) -> None:
    url, _ = serve("examples.agents:slow", keepalive=0.1)
    stream = Stream(url, "SendStreamingMessage", {"message": user("0.6 wait")})
    events = list(stream)
    assert kinds(results(events))[-1] == "statusUpdate TASK_STATE_COMPLETED"
    assert stream.comments >= 3  # the opening comment and keepalives while it slept


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read(self, task_id: str) -> Any:
        self.reads += 1
        return super().read(task_id)


def test_a_blocking_send_waits_on_events_not_by_polling() -> None:
    config = Settings(run="examples.agents:slow", blocking_timeout=10)
    store = CountingStore()
    dispatcher = InProcessDispatcher(store, load_agent(config), config, threads=2)
    client = create_app(config, store=store, dispatcher=dispatcher).test_client()
    try:
        reply = client.post(
            "/",
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "message/send",
                "params": {
                    "message": {
                        "role": "user",
                        "messageId": "m-poll",
                        "parts": [{"kind": "text", "text": "1.5 nap"}],
                    }
                },
            },
        )
        # Completed: the send waited the agent's whole 1.5 s nap. A poll every
        # 5-100 ms would read the task dozens of times meanwhile; following the
        # events reads it a fixed few times (claim, result, reply).
        assert reply.get_json()["result"]["status"]["state"] == "completed"
        assert store.reads < 10, store.reads
    finally:
        dispatcher.close(timeout=5)
