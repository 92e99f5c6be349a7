"""The send promises of the README, on the Redis store through the real front
end: a follow-up sent twice is applied once; a messageId reused after a
cancel starts a new task; `TOOLNEXUS_IDEMPOTENT_SENDS=false` makes every send
a new task. The worker is `PlayingDispatcher` (it saves what a worker saves),
so what is counted is exactly what the front end queued and stored."""

from __future__ import annotations

from typing import Any

from flask.testing import FlaskClient

from shared import Settings
from shared.stores.redis.store import redis_store
from tests.test_web_support import ASK, PlayingDispatcher, ask_back, rpc, user_message
from web import create_app


def front_end(redis_url: str, **settings: Any) -> tuple[FlaskClient, PlayingDispatcher, Any]:
    store = redis_store(redis_url)
    dispatcher = PlayingDispatcher(store, auto=False)
    app = create_app(Settings(**settings), store=store, dispatcher=dispatcher)
    return app.test_client(), dispatcher, store


def send(client: FlaskClient, message: dict[str, Any]) -> dict[str, Any]:
    reply = rpc(client, "message/send", {"message": message, "configuration": {"blocking": False}})
    assert "result" in reply, reply
    return dict(reply["result"])


def test_the_same_follow_up_sent_twice_is_applied_once(redis_url: str) -> None:
    client, dispatcher, store = front_end(redis_url)
    first = send(client, user_message(ASK))
    ask_back(store, first["id"])  # what the worker does with ASK
    assert store.get(first["id"])["status"]["state"] == "input-required"
    follow_up = user_message("Ada", taskId=first["id"], contextId=first["contextId"])

    resumed = send(client, follow_up)
    events = store.events(first["id"], 0)
    again = send(client, follow_up)  # a retry after a lost reply

    assert resumed["id"] == again["id"] == first["id"]
    assert store.events(first["id"], 0) == events  # nothing appended by the retry
    assert dispatcher.enqueued == [first["id"], first["id"]]  # the first send, the follow-up
    history = store.get(first["id"])["history"]
    assert [m["messageId"] for m in history].count(follow_up["messageId"]) == 1
    # The agent asks again before the retry arrives: the retry is still the
    # old answer, not an answer to the new question.
    ask_back(store, first["id"])
    events = store.events(first["id"], 0)
    asked = send(client, follow_up)
    assert asked["status"]["state"] == "input-required"
    assert store.events(first["id"], 0) == events
    assert len(dispatcher.enqueued) == 2
    # A new answer (another messageId) to the new question is applied.
    answer = user_message("Lovelace", taskId=first["id"], contextId=first["contextId"])
    assert send(client, answer)["status"]["state"] == "submitted"
    assert len(dispatcher.enqueued) == 3


def test_a_message_id_reused_after_a_cancel_starts_a_new_task(redis_url: str) -> None:
    client, dispatcher, store = front_end(redis_url)
    message = user_message("do it")
    first = send(client, message)
    assert send(client, message)["id"] == first["id"]  # a retry, before the cancel
    canceled = rpc(client, "tasks/cancel", {"id": first["id"]})["result"]
    assert canceled["status"]["state"] == "canceled"

    second = send(client, message)

    assert second["id"] != first["id"]
    assert second["status"]["state"] == "submitted"
    assert dispatcher.enqueued == [first["id"], second["id"]]
    assert store.get(first["id"])["status"]["state"] == "canceled"  # left as it was
    assert send(client, message)["id"] == second["id"]  # the new task is now its retry target


def test_with_idempotent_sends_off_every_send_is_a_new_task(redis_url: str) -> None:
    client, dispatcher, store = front_end(redis_url, idempotent_sends=False)
    message = user_message("again and again")
    ids = [send(client, message)["id"] for _ in range(3)]
    assert len(set(ids)) == 3
    assert dispatcher.enqueued == ids
    assert set(store.all()) == set(ids)


def test_with_idempotent_sends_on_a_repeat_is_the_same_task(redis_url: str) -> None:
    # The other side of the setting, on the same path: the default keeps one.
    client, dispatcher, store = front_end(redis_url)
    message = user_message("once")
    ids = {send(client, message)["id"] for _ in range(3)}
    assert len(ids) == 1 and dispatcher.enqueued == list(ids)
    assert set(store.all()) == ids
