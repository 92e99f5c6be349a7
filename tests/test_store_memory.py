"""Memory: a Redis near its maxmemory is reported before it refuses work
(/readyz stays ready but warns, and the share is a metric); the memory store
holds a long text about once, however many places of a task show it."""

from __future__ import annotations

import redis
from prometheus_client import REGISTRY

from shared import Settings
from shared.events import artifact_update, status_update, to_state
from shared.stores.memory.store import memory_store
from shared.stores.redis.store import redis_store
from shared.task import COMPLETED, WORKING, new_task, text_message
from shared.transitions import transition
from tests.support.sizes import kept_by
from tests.test_web_support import PlayingDispatcher
from web import create_app


def test_readyz_warns_when_redis_is_near_its_maxmemory(redis_url: str) -> None:
    store = redis_store(redis_url)
    store.record_beat()
    client = store.client
    app = create_app(Settings(), store=store, dispatcher=PlayingDispatcher(store))
    http = app.test_client()
    try:
        client.config_set("maxmemory", 0)
        relaxed = http.get("/readyz")
        assert relaxed.status_code == 200 and "warnings" not in relaxed.json  # type: ignore[operator]
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", int(used / 0.95))  # 95% used: past the 90% default
        near = http.get("/readyz")
        assert near.status_code == 200
        assert "maxmemory" in near.json["warnings"]["store"]  # type: ignore[index]
        ratio = REGISTRY.get_sample_value("toolnexus_store_memory_ratio")
        assert ratio is not None and 0.9 < ratio < 1.0
        client.config_set("maxmemory", used * 4)
        assert "warnings" not in http.get("/readyz").json  # type: ignore[operator]
    finally:
        redis.Redis.from_url(redis_url).config_set("maxmemory", 0)


def test_the_memory_store_holds_each_long_text_once() -> None:
    """A message in the history, a reply that is both the status message and
    an artifact, and the log of it all: each text is kept about once."""
    size = 200_000
    store = memory_store()
    base = kept_by(store)
    task_id = store.create(new_task(text_message("user", "q" * size))).task["id"]
    reply = "r" * size
    assert transition(store, task_id, to_state(WORKING)).applied
    artifact = {"artifactId": "a-1", "parts": [{"kind": "text", "text": reply}]}
    change = lambda t: [  # noqa: E731
        artifact_update(t, artifact),  # type: ignore[arg-type]
        status_update(t, COMPLETED, text_message("agent", reply)),
    ]
    assert transition(store, task_id, change).applied
    task = store.get(task_id)
    assert task is not None and task["history"][-1]["parts"][0]["text"] == reply
    assert kept_by(store) - base < 2.2 * size  # the question and the reply, once each
    # What comes out is a copy: changing it changes nothing stored.
    task["history"][0]["parts"][0]["text"] = "changed"
    assert store.get(task_id)["history"][0]["parts"][0]["text"] == "q" * size  # type: ignore[index]
