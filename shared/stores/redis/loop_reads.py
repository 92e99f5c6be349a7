"""Tasks read from an event loop, pipelined on a connection of their own.

A process that answers reads from an event loop (the gRPC process) must not
block the loop on a round trip; redis.asyncio does not, but costs the
process more CPU a round trip than the blocking read. This reader writes
the store's reads straight to one connection (named `toolnexus-loop-reads`
in CLIENT LIST) and parses the replies with hiredis as they arrive, in an
asyncio protocol: the loop serves other calls while a read is out, and
every read asked for meanwhile goes out together in the next write (one
round trip in flight at a time). A read is sent after it was asked for, so
it is as fresh as a blocking read begun then.

A store reached over plain TCP or a Unix socket is read this way (its user,
password and database sent on connecting, as redis-py sends them), and so
is one on a Sentinel group: the reader connects to the master the Sentinels
name (asked off the loop), checks that the node says it is the master, and
asks again at most every `ROLE_EVERY` seconds of reading, since a master
demoted in a failover keeps its connections and answers reads; a node that
is no longer the master is left for the one the Sentinels name then. TLS is
read the blocking way. A read that fails, meets a closed connection or
outlasts the store's timeout raises `StoreError`, and the caller reads the
blocking way, which says what is wrong; the connection is dropped (a late
reply would answer the wrong read) and opened again for the next read. A
connection that cannot be made (the server down, a user the server refuses
a command of the greeting) is tried again after a delay that doubles up
to 5 s, the reads meanwhile failing at once; the first failure of a
streak is logged as a warning.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import hiredis
import redis
from redis.sentinel import SentinelConnectionPool, SentinelManagedConnection

from shared.backoff import Backoff
from shared.errors import StoreError
from shared.store.contract import Record, is_safe_id

log = logging.getLogger(__name__)

# Bounds a read when the store's pool sets no timeout of its own.
DEFAULT_TIMEOUT: Final = 5.0
# The reader's connection as CLIENT LIST names it.
NAME: Final = "toolnexus-loop-reads"
# Reads in one write at most: a flood of calls is read in turns, none parsed
# in one piece large enough to hold the loop.
BATCH: Final = 256
# Through Sentinel: how often (seconds) a write also asks the node whether it
# is still the master. A demoted master keeps its connections and answers
# reads; the reader then connects to the master the Sentinels name.
ROLE_EVERY: Final = 1.0
ROLE: Final = ["ROLE"]

# A task's record from its snapshot, event number, tail and generation (`_record`).
Decode = Callable[[Any, Any, Any, Any], Record | None]
# A read asked for: its task, its caller's future, and whether it needs the
# script (the snapshot and the events after it) rather than the snapshot alone.
Asked = tuple[str, "asyncio.Future[Record | None]", bool]
Replied = Callable[[list[Any] | Exception], None]


@dataclass(frozen=True)
class Server:
    """Where the reader connects, and as whom: what redis-py's own pool would use."""

    host: str | None
    port: int
    path: str | None  # a Unix socket, in place of host and port
    username: str | None
    password: str | None
    db: int
    timeout: float
    # Where the master is now, asked of the Sentinels on each connect (None:
    # the server above, always); the node's role is then checked as it reads.
    locate: Callable[[], tuple[str, int]] | None = None

    @classmethod
    def of(cls, pool: redis.ConnectionPool) -> Server | None:
        """The pool's server, None where its connections are not plain ones
        (TLS): those are read the blocking way."""
        kwargs = pool.connection_kwargs
        kind = pool.connection_class
        if isinstance(pool, SentinelConnectionPool):
            if kind is not SentinelManagedConnection:
                return None
            return cls(None, 0, None, locate=pool.get_master_address, **_login(kwargs))
        if kind not in (redis.Connection, redis.UnixDomainSocketConnection):
            return None
        unix = kind is redis.UnixDomainSocketConnection
        return cls(
            host=None if unix else kwargs.get("host", "localhost"),
            port=int(kwargs.get("port") or 6379),
            path=kwargs.get("path") if unix else None,
            **_login(kwargs),
        )

    def greeting(self) -> list[list[str]]:
        """The commands a connection starts with: who it is, where it reads."""
        commands = []
        if self.password is not None:
            auth = [self.username, self.password] if self.username else [self.password]
            commands.append(["AUTH", *auth])
        if self.db:
            commands.append(["SELECT", str(self.db)])
        return [*commands, ["CLIENT", "SETNAME", NAME]]


def _login(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {
        "username": kwargs.get("username"),
        "password": kwargs.get("password"),
        "db": int(kwargs.get("db") or 0),
        "timeout": float(kwargs.get("socket_timeout") or DEFAULT_TIMEOUT),
    }


def _is_master(reply: Any) -> bool:
    """ROLE's reply names a master."""
    return isinstance(reply, list) and bool(reply) and reply[0] == b"master"


class LoopReads:
    """Not thread-safe: used from one event loop."""

    def __init__(
        self,
        server: Server,
        script: str,
        sha: str,
        keys: Callable[[str], tuple[str, str]],
        decode: Decode,
    ) -> None:
        """`keys(id)`: a task's hash and tail. A read asks for the hash's
        snapshot alone (`HMGET doc seq base g`: all of a task for a new one or
        one at rest); only where events came after the snapshot (`seq` ≠
        `base`) does it ask again, for `script` (named by `sha`, as the store
        registered it; loaded on connecting: the snapshot, `seq`, the tail
        and `g` in one reply), as the blocking read does. `decode(doc, seq,
        tail, g)` is the record."""
        self._server = server
        self._script = script
        self._sha = sha
        self._keys = keys
        self._decode = decode
        self._connection: _Replies | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._asked: list[Asked] = []  # not sent yet
        self._out: list[Asked] | None = None  # sent, its replies awaited
        self._timer: asyncio.TimerHandle | None = None
        self._role_due = 0.0  # when a write next asks the node's role (Sentinel)
        # After a connection could not be made: no other is tried before
        # `_retry_at` (the reads meanwhile fail at once, to the blocking way).
        self._retry_at = 0.0
        self._backoff = Backoff(initial=0.1, cap=5.0)
        self._failing = False

    async def read(self, task_id: str) -> Record | None:
        if not is_safe_id(task_id):
            return None
        future: asyncio.Future[Record | None] = asyncio.get_running_loop().create_future()
        self._asked.append((task_id, future, False))
        if self._out is None:
            self._send_asked()
        return await future

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _send_asked(self) -> None:
        """Every read asked for so far, in one write (once connected)."""
        connection = self._connection
        if connection is None or connection.lost:
            loop = asyncio.get_running_loop()
            if loop.time() < self._retry_at:
                asked, self._asked = self._asked, []
                _failed(asked, ConnectionError("not connected: trying again shortly"))
            elif self._connecting is None:
                self._connecting = loop.create_task(self._reconnect())
            return
        asked, self._asked = self._asked[:BATCH], self._asked[BATCH:]
        self._out = asked
        commands = [self._command(task_id, whole) for task_id, _, whole in asked]
        loop = asyncio.get_running_loop()
        checks = self._server.locate is not None and loop.time() >= self._role_due
        if checks:
            self._role_due = loop.time() + ROLE_EVERY
        connection.send(
            [ROLE, *commands] if checks else commands,
            lambda replies: self._replied(asked, replies, checks),
        )
        self._timer = loop.call_later(self._server.timeout, self._timed_out, asked)

    def _replied(
        self, asked: list[Asked], replies: list[Any] | Exception, checks: bool = False
    ) -> None:
        """The replies to a write (or why there are none); then the reads asked
        meanwhile. `checks`: the first reply is the node's role."""
        if self._out is not asked:
            return  # already failed (timed out)
        self._out = None
        if self._timer is not None:
            self._timer.cancel()
        if checks and not isinstance(replies, Exception):
            role, *replies = replies
            if not _is_master(role):  # demoted: read again from the master the Sentinels name
                log.info("the task store's node is no longer the master: reconnecting")
                self.close()
                self._asked[:0] = asked
                self._send_asked()
                return
        if isinstance(replies, Exception):
            self.close()  # a late reply would answer the wrong read
            _failed(asked, replies)
        else:
            for one, reply in zip(asked, replies, strict=True):
                try:
                    self._answer(one, reply)
                except Exception as error:  # a reply of no shape a read has: that read fails
                    _failed([one], error)
        if self._asked:
            self._send_asked()

    def _answer(self, asked: Asked, reply: Any) -> None:
        task_id, future, whole = asked
        if isinstance(reply, hiredis.ReplyError):
            if "NOSCRIPT" in str(reply):
                self.close()  # the server forgot it: loaded again on reconnecting
            # WRONGTYPE, NOSCRIPT, …: the blocking read knows each.
            _failed([asked], reply)
        elif future.done():  # the caller went away
            return
        elif whole:
            future.set_result(self._decode(*reply))
        else:
            doc, seq, base, kept = reply
            if seq == base:
                future.set_result(self._decode(doc, seq, None, kept))
            else:  # events after the snapshot: read with them, in the next write
                self._asked.append((task_id, future, True))

    def _command(self, task_id: str, whole: bool) -> list[str]:
        task, tail = self._keys(task_id)
        if whole:
            return ["EVALSHA", self._sha, "2", task, tail]
        return ["HMGET", task, "doc", "seq", "base", "g"]

    def _timed_out(self, asked: list[Asked]) -> None:
        self._replied(asked, TimeoutError(f"no reply in {self._server.timeout:g} s"))

    async def _reconnect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._connection = await asyncio.wait_for(self._connect(), self._server.timeout)
        except Exception as error:
            self._retry_at = loop.time() + self._backoff.next()
            if not self._failing:  # once a streak: the blocking reads say the rest
                log.warning("loop reads: the task store does not connect: %r", error)
                self._failing = True
            asked, self._asked = self._asked, []
            _failed(asked, error)
        else:
            self._backoff.reset()
            if self._failing:
                log.info("loop reads: the task store connects again")
                self._failing = False
        finally:
            self._connecting = None
        if self._asked and self._out is None:
            self._send_asked()

    async def _connect(self) -> _Replies:
        loop = asyncio.get_running_loop()
        server = self._server
        host, port = server.host or "localhost", server.port
        if server.locate is not None:  # the Sentinels' answer: off the loop
            host, port = await loop.run_in_executor(None, server.locate)
        if server.path is not None:
            _, connection = await loop.create_unix_connection(_Replies, server.path)
        else:
            _, connection = await loop.create_connection(_Replies, host, port)
        self._role_due = loop.time() + ROLE_EVERY  # checked in the greeting
        greeted: asyncio.Future[list[Any] | Exception] = loop.create_future()

        def replied(replies: list[Any] | Exception) -> None:
            if not greeted.done():  # done: the connecting was given up
                greeted.set_result(replies)

        checks = [ROLE] if server.locate is not None else []
        connection.send([*server.greeting(), ["SCRIPT", "LOAD", self._script], *checks], replied)
        try:
            replies = await greeted
            if isinstance(replies, Exception):
                raise replies
            for reply in replies:
                if isinstance(reply, hiredis.ReplyError):
                    raise StoreError(f"task store refused the connection: {reply}")
            if checks and not _is_master(replies[-1]):
                raise StoreError("the node the Sentinels named is not the master (yet)")
        except BaseException:
            connection.close()
            raise
        return connection


def _failed(asked: list[Asked], error: Exception) -> None:
    """Each read raises StoreError; its caller then reads the blocking way."""
    log.debug("reading %d tasks on the loop failed: %r", len(asked), error)
    failed = StoreError(f"task store unavailable: {error!r}")
    for _, future, _ in asked:
        if not future.done():
            future.set_exception(failed)


class _Replies(asyncio.Protocol):
    """One connection: commands written in order, each write's replies handed
    to its callback once all of them have come (or why they never will)."""

    def __init__(self) -> None:
        self._parser = hiredis.Reader()
        self._waiting: deque[tuple[int, list[Any], Replied]] = deque()
        self._transport: asyncio.Transport | None = None
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def send(self, commands: list[list[str]], replied: Replied) -> None:
        assert self._transport is not None
        if self.lost:
            replied(ConnectionError("the connection to the task store closed"))
            return
        self._waiting.append((len(commands), [], replied))
        self._transport.write(b"".join(_packed(command) for command in commands))

    def data_received(self, data: bytes) -> None:
        self._parser.feed(data)
        try:
            while (reply := self._parser.gets()) is not False:
                count, replies, replied = self._waiting[0]
                replies.append(reply)
                if len(replies) == count:
                    self._waiting.popleft()
                    replied(replies)
        except (hiredis.ProtocolError, IndexError) as error:  # unreadable, or unasked for
            self.close()
            self._fail(ConnectionError(f"the task store's reply is unreadable: {error!r}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionError(f"the connection to the task store closed: {exc!r}"))

    def close(self) -> None:
        self.lost = True
        if self._transport is not None:
            self._transport.close()

    def _fail(self, error: Exception) -> None:
        self.lost = True
        while self._waiting:
            _, _, replied = self._waiting.popleft()
            replied(error)


def _packed(command: list[str]) -> bytes:
    """One command in RESP: an array of bulk strings."""
    parts = [b"*%d\r\n" % len(command)]
    for argument in command:
        encoded = argument.encode("utf-8")
        parts.append(b"$%d\r\n%s\r\n" % (len(encoded), encoded))
    return b"".join(parts)
