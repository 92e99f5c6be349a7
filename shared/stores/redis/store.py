"""Redis: each task a hash, a tail and an event stream, plus time indexes.

Keys (prefix defaults to "toolnexus:"; the layout is in `shared.stores.redis.scripts`):
  <prefix>task:<id>    hash: doc (JSON snapshot), seq, base, state, mkey
  <prefix>tail:<id>    the events since the snapshot, one JSON per line
  <prefix>log:<id>     stream: the task's events, entry ids 0-<seq>
  <prefix>msg:<hash>   the task a message created (idempotent sends)
  <prefix>ctx:<hash>   the owner of a context
  <prefix>working, <prefix>waiting, <prefix>interrupted
                       the time indexes (`shared.store.time_indexes`), ZSETs
  <prefix>beat         when the reaper last ran
  channel <prefix>events: "<id> <n>" for every task that got events, n its newest

Every write is one Lua script, so the check, the write, the event and the
index updates are a single atomic step; finished tasks, their logs and
their message keys expire together when a TTL is set.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, cast

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from shared.broker.outbox import OutboxMessage
from shared.codec import decode, encode
from shared.contexts import waits_for_context
from shared.errors import ContextTaken
from shared.events import Event, StatusUpdate, context_of, current_status, fold
from shared.generation import FIELD as GENERATION
from shared.generation import UNKNOWN, generation_of, withdrawn
from shared.keys import digest
from shared.ops.store_metrics import count_failover, count_unreplicated
from shared.owners.book import Entry
from shared.pooling import POOL_WAIT
from shared.push.contract import Once
from shared.push.documents import DocumentPush
from shared.redis_nodes.pools import blocking_pool, node_of, server_of
from shared.store.claim_text import claim_text
from shared.store.contract import (
    LOG_LIMIT,
    Commit,
    Created,
    Outcome,
    Record,
    is_safe_id,
    require_safe_id,
)
from shared.store.features import DocumentFeatures
from shared.store.listing import Listing, Query
from shared.store.spec import POOL_SIZE
from shared.store.time_indexes import (
    INTERRUPTED_INDEX,
    WAITING_INDEX,
    WORKING_INDEX,
    TimeIndexed,
    TimeIndexes,
    index_of,
)
from shared.store.time_indexes import (
    STATES as TIME_INDEXES,
)
from shared.store.wakeups import Waiter
from shared.stores.redis.documents import RedisDocuments
from shared.stores.redis.faults import reachable
from shared.stores.redis.indexes import RedisIndexes
from shared.stores.redis.listener import RedisListener
from shared.stores.redis.listing import RedisListing
from shared.stores.redis.loop_reads import LoopReads, Server
from shared.stores.redis.push_upgrade import take_over as take_over_push
from shared.stores.redis.replicas import Replicas
from shared.stores.redis.scripts import (
    CLAIM,
    COMMIT,
    COMMIT_RELEASED,
    CREATE,
    CREATE_HELD,
    FORGET_EXPIRED,
    READ,
)
from shared.stores.redis.turns import RedisTurnBook, taken_ids
from shared.task import IN_FLIGHT, SUBMITTED, Task, epoch, is_terminal, state_of

Clock = Callable[[], float]


class RedisStore(DocumentFeatures, TimeIndexed):
    lists_by_scan = False

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "toolnexus:",
        terminal_ttl: float | None = None,
        clock: Clock = time.time,
        log_limit: int = LOG_LIMIT,
        replicas: Replicas | None = None,
    ) -> None:
        self.client = client
        self._replicas = replicas or Replicas(client)
        self._log_limit = log_limit
        self._prefix = prefix
        self._channel = f"{prefix}events"
        self._beat = f"{prefix}beat"
        self._expiring = f"{prefix}expiring"
        self._ttl = int(terminal_ttl) if terminal_ttl else 0
        self._clock = clock
        self._create = client.register_script(CREATE)
        self._create_held = client.register_script(CREATE_HELD)
        self._commit = client.register_script(COMMIT)
        self._commit_released = client.register_script(COMMIT_RELEASED)
        self._claim = client.register_script(CLAIM)
        self._forget_expired = client.register_script(FORGET_EXPIRED)
        self._read = client.register_script(READ)
        self._listener = RedisListener(client, self._channel, self._newest)
        # Small documents (shared.documents), under the features that keep state.
        self.documents = RedisDocuments(client, prefix, self._replicas)
        indexes = RedisIndexes(client, prefix, self._replicas)
        self.indexes = indexes
        # Written by the task's own scripts (which index: `_entered`), read
        # and re-scored as every store's are.
        self._times = TimeIndexes(indexes, clock)
        self._time_keys = {name: indexes.key(name) for name in TIME_INDEXES}
        self._push = Once()
        self._turns = RedisTurnBook(client, prefix)

    # --- the contract ------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        record = self.read(task_id)
        return record.task if record is not None else None

    def save(self, task: Task) -> Task:
        require_safe_id(task.get("id"))
        events = [current_status(task)]
        if not self._write(task, events, expected=None, snapshot=True):
            # The first write of a new lineage: saved with its generation unknown.
            self._write(*withdrawn(task, events), expected=None, snapshot=True)
        return task

    # --- EventStore ----------------------------------------------------------

    def create(
        self, task: Task, message_key: str | None = None, supersedes: str | None = None
    ) -> Created:
        keys, args = self._create_call(task, message_key, supersedes)
        with self._reachable():
            outcome, found = cast(list[bytes], self._replicas.script(self._create, keys, args))
        return self._created(task, message_key, supersedes, outcome, found)

    def create_held(
        self,
        task: Task,
        message_key: str | None,
        entry: Entry,
        fair: bool,
        outbox: OutboxMessage | None = None,
    ) -> Created:
        """`create`, and (only when it created the task) the task held in this
        store's turn book, in one round trip: a send's two writes as one
        script. What the book took into flight is left with the book, for the
        `Turns.enqueue` of this task that follows (`RedisTurnBook.hold_and_take`).
        `outbox`: the task's message (its broker a database of this server,
        `redis_server`), queued by the same script when the book took the
        task, else kept for the step of the book that takes it
        (`shared.broker.outbox`)."""
        keys, args = self._create_call(task, message_key, None)
        book = self._turns.step_args([entry], [], fair)
        message = outbox.script_args() if outbox is not None else []
        with self._reachable():
            outcome, found, taken, queued, kept = cast(
                list[Any],
                self._replicas.script(
                    self._create_held,
                    keys,
                    [len(args), *args, len(message), *message, *book],
                ),
            )
        if outbox is not None and not kept:
            outbox.unkept()
        elif outbox is not None and queued:
            outbox.sent()
            # First in line (the script leaves out what it queued itself): its
            # message is on the queue before those published after it.
            taken = [outbox.task_id.encode(), *taken]
        if outcome == b"created":
            self._turns.creates.keep(task["id"], taken_ids(taken))
        return self._created(task, message_key, None, outcome, found)

    def loop_reads(self) -> LoopReads | None:
        """Reads from an event loop (`shared.stores.redis.loop_reads`), as
        `read` reads, pipelined on a connection of their own; None where this
        store's server is reached over TLS."""
        server = Server.of(self.client.connection_pool)
        if server is None:
            return None

        def keys(task_id: str) -> tuple[str, str]:
            return self._key("task", task_id), self._key("tail", task_id)

        return LoopReads(server, READ, self._read.sha, keys, _record)

    @property
    def redis_server(self) -> tuple[object, ...] | None:
        """The server this store is a database of (`server_of`): a broker on
        the same one can queue a send's message with its create."""
        return server_of(self.client.connection_pool)

    def _create_call(
        self, task: Task, message_key: str | None, supersedes: str | None
    ) -> tuple[list[str], list[Any]]:
        """CREATE's keys and arguments."""
        task_id = require_safe_id(task.get("id"))
        keys = [
            self._key("task", task_id),
            self._key("tail", task_id),
            self._key("log", task_id),
            self._key("msg", message_key or "none"),
            self._key("ctx", digest(task["contextId"])),
            self._entered(SUBMITTED),
            self._key("hist", task_id),
        ]
        args = [
            encode(task),
            encode(current_status(task)),
            task_id,
            repr(self._clock()),
            task.get("owner", ""),
            "1" if message_key else "0",
            self._prefix,
            self._channel,
            self._log_limit,
            supersedes or "",
            *self._listed(task),
            "" if waits_for_context(task) else encode(task["contextId"]),
            _generation(task),
        ]
        return keys, args

    def _created(
        self,
        task: Task,
        message_key: str | None,
        supersedes: str | None,
        outcome: bytes,
        found: bytes,
    ) -> Created:
        """What CREATE's answer means."""
        if outcome == b"context":
            raise ContextTaken(f"context {task['contextId']} belongs to another caller")
        if outcome == b"existing":
            earlier = self.get(found.decode())
            if earlier is not None:
                return Created(earlier, False)
            return self.create(task, message_key, supersedes)  # it expired meanwhile
        return Created(task, True)

    def read(self, task_id: str) -> Record | None:
        if not is_safe_id(task_id):
            return None
        key = self._key("task", task_id)
        with self._reachable():
            try:
                # One plain command when the snapshot holds every event (a new
                # task, or one at rest); else the snapshot and the events after
                # it, read together by the script.
                doc, seq, base, kept = self.client.hmget(key, "doc", "seq", "base", "g")
                tail = None
                if seq != base:
                    doc, seq, tail, kept = self._read(keys=[key, self._key("tail", task_id)])
            except redis.ResponseError as error:
                if _wrong_type(error):
                    return None  # a key of the wrong type is unreadable data
                raise
        return _record(doc, seq, tail, kept)

    def commit(self, commit: Commit) -> bool:
        return self._write(
            commit.task, commit.events, expected=commit.expected, snapshot=commit.snapshot
        )

    # --- ClaimingStore ------------------------------------------------------

    def claim(self, task_id: str, from_state: str, event: StatusUpdate) -> Outcome | None:
        if not is_safe_id(task_id):
            return Outcome(False, None)
        # The event as text, split where the script puts the stored context
        # id and the generation it counts on from the task's.
        before, between, after = claim_text(event)
        state = event["status"]["state"]
        status_time = repr(epoch(event["status"]["timestamp"]))
        args: list[str | int] = [from_state, "", state, repr(self._clock()), 0, task_id]
        args += [self._channel, self._log_limit, self._prefix, status_time, "", ""]
        args += [before, between, after, self._entered(state)]
        with self._reachable():
            try:
                keys = self._write_keys(task_id)
                found = cast(list[Any], self._replicas.script(self._claim, keys, args))
            except redis.ResponseError as error:
                if _wrong_type(error):
                    return Outcome(False, None)  # unreadable data: as if unknown
                raise
        outcome = found[0]
        if outcome == b"unsupported":
            return None
        record = _record(*found[1:]) if outcome != b"unknown" else None
        return Outcome(outcome == b"claimed" and record is not None, record)

    def events(self, task_id: str, after: int, limit: int | None = None) -> list[tuple[int, Event]]:
        if not is_safe_id(task_id):
            return []
        with self._reachable():
            entries = self.client.xrange(self._key("log", task_id), f"(0-{after}", "+", count=limit)
        logged: list[tuple[int, Event]] = []
        for entry_id, fields in cast(list[tuple[bytes, dict[bytes, bytes]]], entries):
            logged.append((int(entry_id.split(b"-")[1]), decode(fields[b"e"])))
        return logged

    def watch(self, task_id: str) -> AbstractContextManager[Waiter]:
        return self._listener.watch(task_id)

    # --- listing and the time indexes ---------------------------------------

    def all(self) -> dict[str, Task]:
        start = len(self._key("task", ""))  # the ids follow "<prefix>task:"
        with self._reachable():
            keys = [
                cast(bytes, key)
                for key in self.client.scan_iter(match=self._key("task", "*"), count=1000)
            ]
        tasks: dict[str, Task] = {}
        for key in keys:
            task = self.get(key.decode()[start:])
            if task is not None:
                tasks[key.decode()[start:]] = task
        return tasks

    def record_beat(self) -> None:
        with self._reachable():
            self.client.set(self._beat, repr(self._clock()))

    def last_beat(self) -> float | None:
        with self._reachable():
            value = self.client.get(self._beat)
        return float(cast(bytes, value)) if value is not None else None

    def listing(self, query: Query) -> Listing:
        with self._reachable():
            return RedisListing(self.client, self._prefix, _record).answer(query)

    def purge_expired(self) -> int:
        """Redis expires finished tasks by itself; this drops their entries
        from the listing indexes, so listings and their totals stay exact."""
        with self._reachable():
            forgotten = self._forget_expired(
                keys=[self._expiring], args=[repr(self._clock()), self._prefix]
            )
        return int(cast(int, forgotten))

    def memory_use(self) -> tuple[int, int] | None:
        with self._reachable():
            info = self.client.info("memory")
        limit = int(info.get("maxmemory", 0))
        return (int(info["used_memory"]), limit) if limit else None

    def ping(self) -> str:
        """Reads and a small write: a read-only replica or a Redis out of
        memory answers PING but refuses every task it would be sent. With
        replicas asked for, the write waits for them too, so a master that
        has lost its replicas says so here before a send hears it."""
        ready = f"{self._prefix}ready"
        with self._reachable():
            *_, client = self._replicas.pipeline(
                lambda pipe: pipe.ping().set(ready, repr(self._clock()), ex=60).client_info(),
                tolerate=1,  # CLIENT INFO: Redis 6.2 and later
            )
        # The node that took this very write: where the pool's master was last
        # heard of can lag behind it around a failover.
        answered = client.get("laddr") if isinstance(client, dict) else None
        return node_of(self.client.connection_pool, answered)

    def close(self) -> None:
        pass  # the pool's connections close with the process; a listener thread is a daemon

    def _push_upgrade(self) -> Callable[[DocumentPush], object]:
        return lambda push: take_over_push(self.client, self._prefix, push)

    def _accepted(self, message_key: str) -> str | None:
        """The task a message made, while it is kept."""
        with reachable(self.client):
            found = cast(bytes | None, self.client.get(f"{self._prefix}msg:{message_key}"))
            task_id = found.decode() if found is not None else None
            if task_id is None or not is_safe_id(task_id):
                return None
            kept = self.client.exists(f"{self._prefix}task:{task_id}")
        return task_id if kept else None

    def turn_book(self) -> RedisTurnBook:
        return self._turns

    # --- internals -----------------------------------------------------------

    def _write(self, task: Task, events: Any, *, expected: int | None, snapshot: bool) -> bool:
        task_id = require_safe_id(task.get("id"))
        state = state_of(task)
        keys = self._write_keys(task_id)
        args = [
            "" if expected is None else expected,
            encode(task) if snapshot else "",
            state,
            repr(self._clock()),
            self._ttl if self._ttl and is_terminal(state) else 0,
            task_id,
            self._channel,
            self._log_limit,
            self._prefix,
            *self._listed(task),
            encode(context_of(task)),
            _generation(task),
            self._entered(state),
            *(encode(event) for event in events),
        ]
        # Out of flight: the turn book's release goes with the write, where
        # the book asks for it (`RedisTurnBook.release_on_commit`).
        release = None if state in IN_FLIGHT else self._turns.release_args(task_id)
        with self._reachable():
            try:
                if release is None:
                    return bool(self._replicas.script(self._commit, keys, args))
                written, taken = cast(
                    list[Any],
                    self._replicas.script(
                        self._commit_released, keys, [len(args), *args, *release]
                    ),
                )
            except redis.ResponseError as error:
                if _wrong_type(error):
                    return False  # unreadable data, so not the task the caller read
                raise
        if written:
            self._turns.released(task_id, taken)
        return bool(written)

    def _newest(self, task_ids: list[str]) -> list[int | None]:
        """The number of each task's newest event (None: no such task), in one
        round trip: what the listener checks after it lost the channel."""
        pipe = self.client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.hget(self._key("task", task_id), "seq")
        found = pipe.execute(raise_on_error=False)
        return [int(seq) if isinstance(seq, bytes) else None for seq in found]

    def _write_keys(self, task_id: str) -> list[str]:
        """The keys COMMIT and CLAIM touch (see `shared.stores.redis.scripts`)."""
        return [
            self._key("task", task_id),
            self._key("tail", task_id),
            self._key("log", task_id),
            self._time_keys[WORKING_INDEX],
            self._time_keys[WAITING_INDEX],
            self._key("hist", task_id),
            self._expiring,
            self._time_keys[INTERRUPTED_INDEX],
        ]

    def _listed(self, task: Task) -> tuple[str, str, str]:
        """What the listing indexes file a task under: its status time and the
        digests of its owner and context."""
        status_time = epoch(task["status"].get("timestamp", ""))
        return repr(status_time), digest(task.get("owner", "")), digest(context_of(task))

    def _entered(self, state: str) -> str:
        """The key of the time index a task in `state` is in ('' for none):
        the scripts place it there, scored now, and take it out of the others."""
        name = index_of(state)
        return self._time_keys[name] if name is not None else ""

    def _key(self, kind: str, name: str) -> str:
        return f"{self._prefix}{kind}:{name}"

    def _reachable(self) -> AbstractContextManager[None]:
        return reachable(self.client)


def _generation(task: Task) -> str:
    """The task's generation as the scripts keep it ('' for a task that keeps none)."""
    return str(generation_of(task)) if GENERATION in task else ""


def _record(doc: Any, seq: Any, tail: Any, kept: Any = None) -> Record | None:
    """A task from its stored snapshot, event number, tail and generation
    (None: absent or unreadable). A generation the hash says is unknown
    (`g` = 0, after a new lineage) overrides what the snapshot and tail say."""
    if doc is None or seq is None:
        return None
    try:
        events = [decode(line) for line in cast(bytes, tail or b"").splitlines()]
        task = decode(doc)
    except ValueError:
        return None
    if not isinstance(task, dict):
        return None
    folded = fold(cast(Task, task), events)
    if kept == b"0":
        folded["generation"] = UNKNOWN
    return Record(folded, int(seq), len(events))


def _wrong_type(error: redis.ResponseError) -> bool:
    return "WRONGTYPE" in str(error)


def redis_store(
    url: str,
    *,
    prefix: str = "toolnexus:",
    terminal_ttl: float | None = None,
    timeout: float = 2.0,
    clock: Clock = time.time,
    log_limit: int = LOG_LIMIT,
    connections: int = POOL_SIZE,
    sentinel_password: str | None = None,
    min_replicas: int = 0,
    replica_timeout: float = 1.0,
) -> RedisStore:
    """A store on the Redis at `url` (or the master a redis+sentinel:// URL
    names); nothing is sent until first use.

    `timeout` bounds every call, so a peer hears "store unavailable" within
    seconds when Redis is down, instead of a request hanging. Connections
    are pooled and waited for: a front end holds thousands of requests at
    once, and a burst of them queues for a connection (up to `timeout`, at
    least POOL_WAIT) instead of failing the moment all connections are busy.
    A worker that runs more I/O calls than that at once asks for more
    `connections`. With `min_replicas`, each write waits up to
    `replica_timeout` for that many replicas (`shared.stores.redis.replicas`).
    """
    if min_replicas:
        timeout = max(timeout, replica_timeout + 1.0)  # a read outlasts the WAIT
    pool = blocking_pool(
        url,
        max_connections=connections,
        timeout=max(POOL_WAIT, timeout),
        sentinel_password=sentinel_password,
        on_failover=lambda master, before, after: count_failover("redis"),
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        health_check_interval=15,
        retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
    )
    client = redis.Redis(connection_pool=pool)
    replicas = Replicas(
        client, min_replicas, replica_timeout, on_missed=lambda: count_unreplicated("redis")
    )
    return RedisStore(
        client,
        prefix=prefix,
        terminal_ttl=terminal_ttl,
        clock=clock,
        log_limit=log_limit,
        replicas=replicas,
    )
