"""The redis+sentinel:// URL form, read the same by the store, the broker and settings."""

from __future__ import annotations

import pytest

from shared.broker.redis import broker_transport, celery_broker
from shared.errors import ConfigError
from shared.ops.startup import masked
from shared.redis_nodes.pools import BlockingSentinelPool, blocking_pool, node_of
from shared.redis_nodes.url import parse_sentinel
from shared.settings import Settings


def test_every_part_of_a_sentinel_url_is_read() -> None:
    target = parse_sentinel("redis+sentinel://:p%40ss@s1:26380,s2,[::1]:26381/main/3")
    assert target.sentinels == (("s1", 26380), ("s2", 26379), ("::1", 26381))
    assert (target.master, target.db, target.password, target.tls) == ("main", 3, "p@ss", False)
    assert parse_sentinel("rediss+sentinel://u:pw@s1/main").tls
    assert parse_sentinel("redis+sentinel://s1/main").db == 0


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://s1:26379", "names no master"),
        ("redis+sentinel://s1:port/main/0", "bad Sentinel port"),
        ("redis+sentinel://s1:26379/main/one", "must be a number"),
        ("redis+sentinel://:pw@/main/0", "without a host"),
    ],
)
def test_a_malformed_sentinel_url_says_what_is_wrong_and_the_form(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as raised:
        parse_sentinel(url)
    assert "redis+sentinel://[:password@]host1:26379" in str(raised.value)
    with pytest.raises(ConfigError, match="TOOLNEXUS_STORE"):
        Settings.from_env({"TOOLNEXUS_STORE": url})
    with pytest.raises(ConfigError, match="TOOLNEXUS_BROKER_URL"):
        Settings.from_env({"TOOLNEXUS_BROKER_URL": url})


def test_settings_take_a_sentinel_url_for_the_store_and_the_broker() -> None:
    url = "redis+sentinel://:pw@s1:26379,s2:26379/main/1"
    settings = Settings.from_env(
        {
            "TOOLNEXUS_STORE": url,
            "TOOLNEXUS_BROKER_URL": url.replace("/1", "/0"),
            "TOOLNEXUS_SENTINEL_PASSWORD": "sentinel-pw",
            "TOOLNEXUS_REDIS_MIN_REPLICAS": "1",
        }
    )
    assert isinstance(settings, Settings)
    assert (settings.store, settings.redis_min_replicas, settings.redis_replica_timeout) == (
        url,
        1,
        1.0,
    )
    assert "pw" not in masked(url) and "s1:26379,s2:26379/main/1" in masked(url)


def test_the_broker_url_becomes_kombus_sentinel_list_with_the_master_and_its_password() -> None:
    url, options = celery_broker(
        "redis+sentinel://:p%3Aw@s1:26380,s2:26381/main/2", "sentinel-pw", {"socket_timeout": 2.0}
    )
    assert url == "sentinel://:p%3Aw@s1:26380/2;sentinel://:p%3Aw@s2:26381/2"
    assert options == {
        "master_name": "main",
        "sentinel_kwargs": {"socket_timeout": 2.0, "password": "sentinel-pw"},
    }
    assert broker_transport("redis+sentinel://s1/main") == "shared.broker.redis:SentinelTransport"
    assert celery_broker("redis://h:6379/0", "unused") == ("redis://h:6379/0", {})
    with pytest.raises(ConfigError, match="rediss"):
        celery_broker("rediss+sentinel://s1/main/0", None)


def test_the_sentinel_pool_waits_for_a_free_connection_and_names_the_master() -> None:
    # Sentinel's pool and redis-py's blocking pool combined: both parts must
    # still be there (a redis-py that renames either fails here by name).
    pool = blocking_pool("redis+sentinel://:pw@127.0.0.1:1/main/4", max_connections=3, timeout=0.5)
    assert isinstance(pool, BlockingSentinelPool)
    assert pool.max_connections == 3 and pool.timeout == 0.5
    assert pool.connection_kwargs["db"] == 4 and pool.connection_kwargs["password"] == "pw"
    assert pool.service_name == "main" and pool.is_master
    assert node_of(pool) == "(no master heard of yet) (master 'main' via Sentinel)"
