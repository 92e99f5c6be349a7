"""Fixtures every test module can use.

Redis: a private `redis-server` started once per session on a free port
(or `REDIS_URL` when set). Where no Redis can be had the Redis tests are
skipped with the reason printed; under `CI=true` they fail instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from tests.support.redis_server import RedisServer, ci


@pytest.fixture(scope="session")
def redis_server_url() -> Iterator[str]:
    if url := os.environ.get("REDIS_URL"):
        yield url.rstrip("/")
        return
    try:
        server = RedisServer().start()
    except (FileNotFoundError, RuntimeError, TimeoutError) as error:
        message = f"NO REDIS: cannot start a private redis-server ({error}); Redis tests skipped"
        if ci():
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield server.url
    finally:
        server.close()


@pytest.fixture
def redis_url(redis_server_url: str) -> Iterator[str]:
    """A Redis URL on database 0. Our private server is emptied before each
    test (every database: tests also use db 1 and up); a `REDIS_URL` given
    from outside only has its database 0 emptied."""
    url = f"{redis_server_url}/0" if redis_server_url.count("/") == 2 else redis_server_url
    client = redis.Redis.from_url(url)
    if os.environ.get("REDIS_URL"):
        client.flushdb()
    else:
        client.flushall()
    yield url
    client.close()


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """A PostgreSQL database for the session, whose schemas the tests use."""
    from tests.support.postgres import session_database

    with session_database() as name:
        yield name


@pytest.fixture
def postgres_url(postgres_database: str) -> Iterator[str]:
    """A store URL of a fresh, migrated schema of its own, dropped after the test."""
    from tests.support.postgres import fresh_schema

    with fresh_schema(postgres_database) as url:
        yield url
