"""Redis that answers with an error instead of dropping the connection: a
password it wants or refuses, a read-only replica, no memory left, protected
mode. Real redis-server processes in each state; a peer hears "task store
unavailable" (never "internal error" or the password), and /readyz names
the cause."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from shared.settings import Settings
from tests.support.redis_server import RedisServer, ci
from tests.test_web_support import NoBroker
from web import create_app

PASSWORD = "s3cret-pass"


@pytest.fixture
def servers() -> Iterator[list[RedisServer]]:
    started: list[RedisServer] = []
    yield started
    for server in reversed(started):
        server.close()


def start(servers: list[RedisServer], *args: str, **options: str) -> RedisServer:
    server = RedisServer(args=args, **options).start()
    servers.append(server)
    return server


def client_for(url: str) -> Any:
    return create_app(Settings(store=url), dispatcher=NoBroker()).test_client()


def send(client: Any) -> dict[str, Any]:
    message = {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "hi"}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    reply: dict[str, Any] = client.post("/", json=body).get_json()
    return reply


def assert_refused(url: str, reason: str) -> None:
    client = client_for(url)
    reply = send(client)
    assert reply["error"]["code"] == -32603, reply
    assert reply["error"]["message"] == "task store unavailable", reply
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.get_json()["store"] == f"task store unavailable: {reason}"
    assert PASSWORD not in ready.get_data(as_text=True)
    assert PASSWORD not in str(reply)


def test_a_password_is_required(servers: list[RedisServer]) -> None:
    server = start(servers, password=PASSWORD)
    assert_refused(f"redis://127.0.0.1:{server.port}/1", "Redis requires a password")


def test_a_wrong_password_is_refused(servers: list[RedisServer]) -> None:
    server = start(servers, password=PASSWORD)
    assert_refused(
        f"redis://:wrong-{PASSWORD}@127.0.0.1:{server.port}/1", "Redis refused the password"
    )


def test_the_right_password_works(servers: list[RedisServer]) -> None:
    server = start(servers, password=PASSWORD)
    client = client_for(f"redis://:{PASSWORD}@127.0.0.1:{server.port}/1")
    assert send(client)["result"]["status"]["state"] == "submitted"
    assert client.get("/readyz").get_json().get("store") is None


def test_a_read_only_replica_is_not_ready_and_takes_no_task(servers: list[RedisServer]) -> None:
    primary = start(servers)
    replica = start(servers, "--replicaof", "127.0.0.1", str(primary.port))
    assert_refused(f"{replica.url}/0", "Redis is a read-only replica")


def test_redis_out_of_memory_is_not_ready_and_takes_no_task(servers: list[RedisServer]) -> None:
    server = start(servers, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
    filler = redis.Redis.from_url(server.url)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for n in range(10_000):
            filler.set(f"filler:{n}", "x" * 4096)
    assert_refused(f"{server.url}/0", "Redis is out of memory")


def non_loopback_address() -> str | None:
    """This host's address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def test_protected_mode_refusing_a_remote_client(servers: list[RedisServer]) -> None:
    address = non_loopback_address()
    if address is None:
        message = "NO NON-LOOPBACK ADDRESS: cannot reach Redis as a remote client"
        if ci():
            pytest.fail(message)
        pytest.skip(message)
    # Listening everywhere, no password: Redis answers other hosts with DENIED.
    server = start(servers, "--protected-mode", "yes", bind="* -::*")
    assert_refused(
        f"redis://{address}:{server.port}/0", "Redis refuses remote clients (protected mode)"
    )
