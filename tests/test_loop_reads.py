"""Tasks read from an event loop (`shared.stores.redis.loop_reads`), on real
redis-servers: each read is the blocking read's record (a task with events
after its snapshot read again with them); reads asked while one
is out go together; a read that cannot be answered raises StoreError (the
caller then reads the blocking way) and the reader serves again once the
server does; and the gRPC process's GetTask reads that way.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import hiredis
import pytest
import redis
from a2a.types import a2a_pb2, a2a_pb2_grpc

from shared.errors import StoreError
from shared.events import artifact_update
from shared.events import to_state as moved_to
from shared.stores.redis import loop_reads
from shared.stores.redis.loop_reads import LoopReads, Server
from shared.stores.redis.store import RedisStore, redis_store
from shared.task import new_task
from shared.transitions import transition
from tests.support.grpc_process import grpc_process, process_env, sent_at_once
from tests.support.polling import wait_for
from tests.support.ports import free_port
from tests.support.redis_server import RedisServer
from tests.support.sentinel import SentinelGroup


def _task(store: RedisStore) -> str:
    message: Any = {"role": "user", "messageId": uuid.uuid4().hex, "parts": [{"text": "hi"}]}
    task = new_task(message)
    store.create(task)
    return task["id"]


@contextmanager
def _reading(store: RedisStore) -> Iterator[LoopReads]:
    """The store's loop reader, closed afterwards."""
    reads = store.loop_reads()
    assert reads is not None
    try:
        yield reads
    finally:
        reads.close()


@pytest.fixture
def private() -> Iterator[RedisServer]:
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


def test_a_task_read_from_the_loop_is_the_task_read_the_blocking_way(redis_url: str) -> None:
    store = redis_store(redis_url)
    fresh, streamed = _task(store), _task(store)
    transition(store, streamed, moved_to("working"))
    for index in range(3):  # appended after the last snapshot: read with the task's tail
        artifact: Any = {"artifactId": f"a{index}", "parts": [{"text": str(index)}]}
        transition(store, streamed, lambda task, a=artifact: [artifact_update(task, a)])
    stored = redis.Redis.from_url(redis_url)
    assert stored.hget(f"toolnexus:task:{streamed}", "seq") != stored.hget(
        f"toolnexus:task:{streamed}", "base"
    )

    async def read_all() -> list[Any]:
        with _reading(store) as reads:
            asked = [fresh, streamed, "no-such-task", "../not-an-id"]
            return [await reads.read(task_id) for task_id in asked]

    found = asyncio.run(read_all())
    assert found == [store.read(fresh), store.read(streamed), None, None]
    assert found[1] is not None and len(found[1].task["artifacts"]) == 3


def test_reads_asked_while_one_is_out_go_together_and_each_gets_its_own(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = redis_store(redis_url)
    ids = [_task(store) for _ in range(20)]
    writes: list[int] = []
    send = loop_reads._Replies.send

    def counted(self: Any, commands: list[list[str]], replied: Any) -> None:
        writes.append(len(commands))
        send(self, commands, replied)

    monkeypatch.setattr(loop_reads._Replies, "send", counted)

    async def read_all() -> list[Any]:
        with _reading(store) as reads:
            return await asyncio.gather(*(reads.read(ids[i % 20]) for i in range(200)))

    monkeypatch.setattr(loop_reads, "BATCH", 64)
    found = asyncio.run(read_all())
    assert [record.task["id"] for record in found] == [ids[i % 20] for i in range(200)]
    reads_sent = writes[1:]  # the first write is the connection's greeting
    assert sum(reads_sent) == 200
    assert len(reads_sent) < 200 and 1 < max(reads_sent) <= 64


def test_a_key_of_the_wrong_type_fails_that_read_alone(redis_url: str) -> None:
    store = redis_store(redis_url)
    good = _task(store)
    redis.Redis.from_url(redis_url).set("toolnexus:task:wrong-type", "a string")

    async def read_both() -> list[Any]:
        with _reading(store) as reads:
            return await asyncio.gather(
                reads.read("wrong-type"), reads.read(good), return_exceptions=True
            )

    wrong, right = asyncio.run(read_both())
    assert isinstance(wrong, StoreError)
    assert right == store.read(good)
    assert store.read("wrong-type") is None  # the blocking read says unreadable: no task


def test_a_read_fails_while_the_server_is_down_and_succeeds_once_it_is_back(
    private: RedisServer,
) -> None:
    store = redis_store(f"{private.url}/1", timeout=1.0)
    task_id = _task(store)

    async def outage() -> None:
        with _reading(store) as reads:
            assert await reads.read(task_id) == store.read(task_id)
            private.kill()
            with pytest.raises(StoreError):
                await reads.read(task_id)
            with pytest.raises(StoreError):  # reconnecting is refused too
                await reads.read(task_id)
            private.start()
            found = await _read_when_back(reads, task_id)
            assert found is None  # the server came back empty (no persistence)

    asyncio.run(outage())


async def _read_when_back(reads: LoopReads, task_id: str, within: float = 15.0) -> Any:
    """The read once the reader connects again (it waits a short delay
    between attempts, the reads meanwhile failing at once)."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        try:
            return await reads.read(task_id)
        except StoreError:
            assert asyncio.get_running_loop().time() < deadline, "the reader never came back"
            await asyncio.sleep(0.05)


def test_a_connection_refused_is_tried_again_after_a_delay_and_warned_of_once(
    private: RedisServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    store = redis_store(f"{private.url}/1", timeout=1.0)
    task_id = _task(store)
    attempts: list[float] = []
    connect = LoopReads._connect

    async def counted(self: LoopReads) -> Any:
        attempts.append(asyncio.get_running_loop().time())
        return await connect(self)

    monkeypatch.setattr(LoopReads, "_connect", counted)
    caplog.set_level(logging.INFO, logger="shared.stores.redis.loop_reads")

    async def refused() -> None:
        with _reading(store) as reads:
            private.stop()
            for _ in range(20):  # one attempt, then failing at once within its delay
                with pytest.raises(StoreError):
                    await reads.read(task_id)
            assert len(attempts) == 1
            await asyncio.sleep(0.3)  # past the first delays: tried again, refused again
            for _ in range(3):
                with pytest.raises(StoreError):
                    await reads.read(task_id)
                await asyncio.sleep(0.25)
            assert 2 <= len(attempts) <= 4
            private.start()
            await _read_when_back(reads, task_id)

    asyncio.run(refused())
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "does not connect" in warned[0].getMessage()
    assert any("connects again" in r.getMessage() for r in caplog.records)


def test_a_paused_server_fails_the_reads_after_the_timeout_and_serves_after(
    private: RedisServer,
) -> None:
    store = redis_store(f"{private.url}/1", timeout=0.5)
    task_id = _task(store)

    async def paused() -> None:
        with _reading(store) as reads:
            assert await reads.read(task_id) is not None
            private.pause()
            try:
                loop = asyncio.get_running_loop()
                began = loop.time()
                asked = [reads.read(task_id) for _ in range(3)]
                failed = await asyncio.wait_for(asyncio.gather(*asked, return_exceptions=True), 10)
                assert all(isinstance(error, StoreError) for error in failed), failed
                assert loop.time() - began < 5.0
            finally:
                private.resume()
            assert await _read_when_back(reads, task_id) == store.read(task_id)

    asyncio.run(paused())


def test_the_password_and_database_are_sent_on_connecting(tmp_path: Path) -> None:
    server = RedisServer(password="s3cret").start()
    try:
        store = redis_store(f"{server.url}/3")
        task_id = _task(store)

        async def read(on: RedisStore) -> Any:
            with _reading(on) as reads:
                return await reads.read(task_id)

        assert asyncio.run(read(store)) == store.read(task_id)
        wrong = redis_store(f"redis://:wrong@127.0.0.1:{server.port}/3")
        with pytest.raises(StoreError):
            asyncio.run(read(wrong))
    finally:
        server.close()


def test_a_script_the_server_forgot_is_loaded_again(redis_url: str) -> None:
    store = redis_store(redis_url)
    task_id = _task(store)
    transition(store, task_id, moved_to("working"))  # after the snapshot: read by the script

    async def flushed() -> None:
        with _reading(store) as reads:
            assert await reads.read(task_id) is not None
            redis.Redis.from_url(redis_url).script_flush()
            with pytest.raises(StoreError):
                await reads.read(task_id)  # NOSCRIPT: this one reads the blocking way
            assert await reads.read(task_id) == store.read(task_id)

    asyncio.run(flushed())


def test_tls_stores_read_the_blocking_way_and_sentinel_ones_find_the_master() -> None:
    tls = redis.ConnectionPool.from_url("rediss://127.0.0.1:6380/0")
    assert Server.of(tls) is None
    assert Server.of(redis.ConnectionPool.from_url("unix:///tmp/redis.sock?db=2")) == Server(
        host=None,
        port=6379,
        path="/tmp/redis.sock",
        username=None,
        password=None,
        db=2,
        timeout=loop_reads.DEFAULT_TIMEOUT,
    )
    # Nothing is sent until first use: no Sentinel needs to answer here.
    sentinel = redis_store("redis+sentinel://:pw@127.0.0.1:26379/mymaster/3")
    reads = sentinel.loop_reads()
    assert reads is not None
    server = Server.of(sentinel.client.connection_pool)
    assert server is not None and server.locate is not None
    assert (server.password, server.db) == ("pw", 3)


@pytest.mark.timeout(120)
def test_through_a_failover_the_reader_follows_the_master_sentinel_names() -> None:
    """On a real master, replica and three Sentinels: reads come from the
    master; after a failover that demotes the master alive (it keeps its
    connections and answers reads), the reader notices within a second of
    reading and reads from the promoted node, changes made there included."""
    group = SentinelGroup(password="master-secret").start()
    try:
        store = redis_store(group.url.removesuffix("/0") + "/1")
        task_id = _task(store)
        old = group.master.port

        async def follows() -> None:
            with _reading(store) as reads:
                assert await reads.read(task_id) == store.read(task_id)
                group.sentinel_client().execute_command("SENTINEL", "FAILOVER", "toolnexus")
                new = await asyncio.to_thread(group.wait_for_failover)
                assert new[1] != old
                # The change is made on the promoted node itself, once it takes writes.
                promoted = redis_store(f"redis://:master-secret@127.0.0.1:{new[1]}/1")
                changed = await asyncio.to_thread(
                    wait_for,
                    lambda: _moved(promoted, task_id),
                    timeout=60,
                    what="a change saved on the promoted master",
                )
                deadline = asyncio.get_running_loop().time() + 30
                while True:
                    try:
                        found = await reads.read(task_id)
                    except StoreError:  # between masters: the caller reads the blocking way
                        found = None
                    master = group.master_address()
                    named = master is not None and [
                        c
                        for c in redis.Redis(port=master[1], password="master-secret").client_list()
                        if c["name"] == loop_reads.NAME
                    ]
                    if found == changed and named:
                        break
                    assert asyncio.get_running_loop().time() < deadline, (found, named)
                    await asyncio.sleep(0.1)

        asyncio.run(follows())
    finally:
        group.close()


def _moved(store: RedisStore, task_id: str) -> Any:
    """The task moved to working, once the store can write (None until then)."""
    try:
        if transition(store, task_id, moved_to("working")).applied:
            return store.read(task_id)
    except StoreError:
        return None
    return None


def _reader_connection(admin: redis.Redis) -> dict[str, Any]:
    """The loop reader's connection as CLIENT LIST shows it (it names itself)."""
    named = [c for c in admin.client_list() if c["name"] == loop_reads.NAME]
    assert len(named) == 1, named
    return named[0]


def test_the_grpc_process_reads_get_task_from_the_loop(
    private: RedisServer, tmp_path: Path
) -> None:
    """GetTask reads its task on the reader's own connection (the snapshot
    alone at rest; with the events after it, by the script, when there are
    some), and sees each change saved before it was asked; a finished task,
    once read, is answered from the process's memory."""
    port = free_port()
    env = process_env(private.url, port, f"loop-reads-{uuid.uuid4().hex[:8]}")
    metadata = (("a2a-version", "1.0"),)
    store = redis_store(f"{private.url}/1")
    admin = redis.Redis.from_url(private.url, decode_responses=True)
    with (
        grpc_process(env, tmp_path / "grpc.log") as process,
        grpc.insecure_channel(f"127.0.0.1:{port}") as channel,
    ):
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        sent = sent_at_once(stub, metadata)
        get = a2a_pb2.GetTaskRequest(id=sent.id)
        assert not [c for c in admin.client_list() if c["name"] == loop_reads.NAME]
        # working: an event after the snapshot (the HMGET, then the script);
        # input-required, at rest: the snapshot alone (the HMGET).
        for state, wire_state, last_command in [
            ("working", a2a_pb2.TASK_STATE_WORKING, "evalsha"),
            ("input-required", a2a_pb2.TASK_STATE_INPUT_REQUIRED, "hmget"),
        ]:
            assert transition(store, sent.id, moved_to(state)).applied
            admin.config_resetstat()
            assert stub.GetTask(get, metadata=metadata, timeout=30).status.state == wire_state
            assert _reader_connection(admin)["cmd"] == last_command
            calls = admin.info("commandstats")
            # The script's own HMGET counts too: a blocking read as well would add more.
            reads = 2 if last_command == "evalsha" else 1
            assert calls["cmdstat_hmget"]["calls"] == reads
            assert calls.get("cmdstat_evalsha", {"calls": 0})["calls"] == reads - 1
        assert transition(store, sent.id, moved_to("canceled")).applied
        done = stub.GetTask(get, metadata=metadata, timeout=30)
        assert done.status.state == a2a_pb2.TASK_STATE_CANCELED
        admin.config_resetstat()
        assert stub.GetTask(get, metadata=metadata, timeout=30) == done
        assert "cmdstat_hmget" not in admin.info("commandstats")
        assert process.alive(), process.output()


def test_a_reply_no_read_has_fails_that_read_and_the_reader_goes_on() -> None:
    """A server that answers the greeting as Redis does, then each read with
    an integer (no shape a read has): each read raises StoreError, none hangs,
    and the next read is asked again."""

    async def scenario() -> None:
        answered: list[bytes] = []

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            parser = hiredis.Reader()
            while data := await reader.read(65536):
                parser.feed(data)
                while (command := parser.gets()) is not False:
                    answered.append(command[0])
                    name = command[0].upper()
                    if name == b"SCRIPT":
                        writer.write(b"$40\r\n" + b"0" * 40 + b"\r\n")
                    elif name == b"CLIENT":
                        writer.write(b"+OK\r\n")
                    else:
                        writer.write(b":5\r\n")
                await writer.drain()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        store = redis_store(f"redis://127.0.0.1:{port}/0", timeout=2.0)
        with _reading(store) as reads:
            for _ in range(2):
                with pytest.raises(StoreError):
                    await asyncio.wait_for(reads.read("some-task"), 5)
            assert answered.count(b"HMGET") == 2
            server.close()

    asyncio.run(scenario())
