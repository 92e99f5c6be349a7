"""A Redis near its maxmemory is reported before it refuses work: /readyz
stays ready but warns, and the share is a metric."""

from __future__ import annotations

import redis
from prometheus_client import REGISTRY

from shared import Settings
from shared.redis_store import redis_store
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
