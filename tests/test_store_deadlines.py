"""No store call waits for ever, and no lock outlives its client.

Each store is reached through a `FaultProxy` whose `partition()` loses
every open connection for good (nothing forwarded either way, neither side
told): a call on such a connection must be abandoned at the store's own
deadline and the next call served on a new one; a PostgreSQL session whose
client vanished must not keep what it holds; a turn-book step cut off
between its two statements must leave nothing locked; and a process's
listener, whose connection is lost the same way, must hear again. Real
servers throughout: the machine's PostgreSQL (a schema of the test's own)
and a private redis-server.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
import pytest

from shared import StoreError
from shared.events import to_state
from shared.owners.book import TurnState
from shared.stores.postgres import postgres_store
from shared.stores.postgres.session import server_settings
from shared.stores.postgres.store import PostgresStore, split_url
from shared.stores.redis.store import redis_store
from shared.stores.sql.runner import Transaction
from shared.task import WORKING
from shared.transitions import transition
from tests.support.failover import a_task
from tests.support.fault_proxy import FaultProxy, proxied, proxy_for
from tests.support.polling import wait_for

T = TypeVar("T")
TIMEOUT = 1.0  # the stores' timeout here: short, so a lost call ends soon


@pytest.fixture
def proxy(request: pytest.FixtureRequest) -> Iterator[FaultProxy]:
    url = request.getfixturevalue("postgres_url")
    with proxy_for(url, 5432) as started:
        yield started


@pytest.fixture
def through(proxy: FaultProxy, postgres_url: str) -> Iterator[PostgresStore]:
    """A store whose connections go through the proxy."""
    store = postgres_store(proxied(postgres_url, proxy.port), timeout=TIMEOUT)
    yield store
    store.close()


def returned(call: Callable[[], T], within: float = 60.0) -> T | BaseException:
    """What `call` returned or raised, run on a thread: a call still out after
    `within` seconds fails the test (a hang, not a slow answer)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    assert outcome, f"the call was still waiting after {within:g} s"
    return outcome[0]  # type: ignore[no-any-return]


def test_a_statement_on_a_lost_connection_is_abandoned_and_the_next_call_served(
    through: PostgresStore, proxy: FaultProxy
) -> None:
    task = through.save(a_task())
    # Three pooled connections, all to be lost at once.
    sleepers = [
        threading.Thread(target=lambda: through.statements.run("SELECT pg_sleep(0.3)", ()))
        for _ in range(3)
    ]
    for sleeper in sleepers:
        sleeper.start()
    for sleeper in sleepers:
        sleeper.join()
    proxy.partition()
    failed = returned(lambda: through.get(task["id"]))
    # Given up by the client's own deadline (psycopg drives every wait through
    # Connection.wait, which the store's connections override: should psycopg
    # stop doing so, the call hangs and this fails here, naming it).
    assert isinstance(failed, StoreError), failed
    assert f"no answer from the server within {TIMEOUT + 1:g} s" in str(failed)
    proxy.heal()
    # The connections lost with it were replaced with it, not found one
    # deadline at a time: no call after the heal meets one (it may wait for
    # the pool to connect again, and say so).
    failures = []

    def served() -> bool:
        try:
            return through.get(task["id"]) == task
        except StoreError as error:
            failures.append(str(error))
            return False

    wait_for(served, timeout=60, interval=0.2, what="a call served after the heal")
    assert not [failure for failure in failures if "no answer from the server" in failure]


def test_a_turn_book_step_cut_off_midway_leaves_nothing_locked(
    through: PostgresStore, proxy: FaultProxy, postgres_url: str
) -> None:
    """The step's client vanishes between reading the book and writing it
    back: another process's steps go on at once, and the lost step's write
    never lands."""
    # Its lock timeout (0.3 s) well inside the lost session's time to be
    # ended by the server (TIMEOUT idle in a transaction).
    direct = postgres_store(postgres_url, timeout=0.3)
    lost_book, book = through.turn_book(), direct.turn_book()
    lost_book.register("warm", 1, 60)  # its connection made before the partition
    meanwhile: list[BaseException | None] = []

    def cut_off(state: TurnState, now: float) -> None:
        proxy.partition()  # after the read, before the write
        # Another process steps the book while this step's client is gone
        # (before the server could end its session): were the row locked
        # by this step, that would wait out the lock timeout and fail.
        meanwhile.append(returned(lambda: book.register("other", 2, 60)))
        state.register("lost", 1, 60, now)

    failed = returned(lambda: lost_book._step(cut_off))
    assert isinstance(failed, StoreError), failed
    assert meanwhile == [None]
    assert book.view().capacity == 3  # "warm" and "other": the lost step wrote nothing
    direct.close()


def test_a_session_left_in_a_transaction_by_a_vanished_client_is_ended(
    through: PostgresStore, proxy: FaultProxy, postgres_url: str
) -> None:
    """No path of the store leaves a transaction open across a round trip;
    should a client vanish inside one anyway, the server ends its session
    (idle_in_transaction_session_timeout) and the locks go with it."""
    pid: list[int] = []

    through.turn_book().register("worker@host", 1, 60.0)  # the book's document is there

    def vanish() -> None:
        with through.statements.connection() as conn:
            conn.execute("BEGIN")
            conn.execute("SELECT 1 FROM documents WHERE name = 'turn-book' FOR UPDATE")
            pid.append(conn.info.backend_pid)
            proxy.partition()
            conn.execute("SELECT 1")  # never answered

    failed = returned(lambda: vanish())
    assert isinstance(failed, StoreError), failed
    url, schema_name = split_url(postgres_url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {schema_name}")

        def ended() -> bool:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid[0],)
            ).fetchone()
            return row is not None and row[0] == 0

        wait_for(ended, timeout=30, what="the server to end the vanished client's session")
        conn.execute("SET lock_timeout = '1s'")
        conn.execute("SELECT 1 FROM documents WHERE name = 'turn-book' FOR UPDATE")  # free


def test_every_connection_tells_the_server_when_to_give_up(through: PostgresStore) -> None:
    wanted = server_settings(TIMEOUT)
    with through.statements.connection() as conn:
        for name, value in wanted.items():
            row = conn.execute(
                "SELECT setting, unit FROM pg_settings WHERE name = %s", (name,)
            ).fetchone()
            assert row is not None, name
            assert _as_text(row[0], row[1]) == value, (name, row)
        client = conn.info.get_parameters()
    # libpq's own probes of the server.
    assert client["keepalives"] == "1"
    assert client["keepalives_idle"] == "1"
    assert client["tcp_user_timeout"] == str(round((TIMEOUT + 3) * 1000))


def _as_text(setting: str, unit: str | None) -> str:
    """pg_settings' value as `server_settings` writes it."""
    if unit == "ms":
        return f"{setting}ms"
    return setting  # seconds (the keepalives), or a count


def test_a_listener_whose_connection_is_lost_listens_again(
    through: PostgresStore, proxy: FaultProxy, postgres_url: str
) -> None:
    writer = postgres_store(postgres_url, timeout=TIMEOUT)
    task_id = writer.save(a_task())["id"]
    with through.watch(task_id) as watch:
        proxy.partition()  # the listener's connection lost with the others
        time.sleep(0.5)
        proxy.heal()
        # The listener finds its connection gone (it asks the server after a
        # store timeout without a notice), listens again, and hears this.
        transition(writer, task_id, to_state(WORKING))
        assert watch.wait(60, after=1), "the listener never heard again"
    writer.close()


def test_a_redis_listener_whose_connection_is_lost_listens_again(redis_url: str) -> None:
    with proxy_for(redis_url, 6379) as proxy:
        through = redis_store(proxied(redis_url, proxy.port), timeout=TIMEOUT)
        writer = redis_store(redis_url)
        task_id = writer.save(a_task())["id"]
        with through.watch(task_id) as watch:
            proxy.partition()
            time.sleep(0.5)
            proxy.heal()
            transition(writer, task_id, to_state(WORKING))
            assert watch.wait(60, after=1), "the listener never heard again"


def test_a_write_cut_off_between_its_two_exchanges_leaves_its_task_unlocked(
    through: PostgresStore, proxy: FaultProxy, postgres_url: str
) -> None:
    """A write's transaction spans two exchanges (its locked reads, then the
    rest and its COMMIT). Its client lost between them: the server waits for
    it idle in the transaction, which it ends after the timeout, so another
    process's write of the task goes through while the lost client is still
    cut off, and the lost write never lands."""
    direct = postgres_store(postgres_url, timeout=TIMEOUT)
    task = direct.save(a_task())
    assert through.get(task["id"]) == task  # its connection made before the partition
    cut = threading.Event()

    def cut_off(t: Transaction) -> None:
        t.firsts(("SELECT seq FROM tasks WHERE id = :id FOR UPDATE", {"id": task["id"]}))
        proxy.partition()  # the row locked, the rest not yet sent
        cut.set()
        t.send("UPDATE tasks SET state = 'lost' WHERE id = :id", {"id": task["id"]})

    lost = threading.Thread(target=lambda: returned(lambda: through._writing(cut_off)))
    lost.start()
    assert cut.wait(30)

    def moved() -> bool:
        try:
            return transition(direct, task["id"], to_state(WORKING)).applied
        except StoreError:  # the row still locked: its lock timeout ran out
            return False

    # Still partitioned here: the row was freed by the server, not by the client.
    wait_for(moved, timeout=30, interval=0.2, what="the task's row to be free again")
    proxy.heal()
    lost.join(30)
    record = direct.read(task["id"])
    assert record is not None and record.task["status"]["state"] == WORKING
    direct.close()


def test_a_write_cut_off_inside_an_exchange_is_ended_by_the_store_s_upkeep(
    through: PostgresStore, proxy: FaultProxy, postgres_url: str
) -> None:
    """A client lost in the middle of an exchange (a statement sent, the
    Sync that ends the exchange not) leaves its session waiting for the rest
    with no timeout of the server's running: not a statement (it finished),
    not idle in a transaction (no Sync came). The reaper's upkeep of the
    store ends such a session of the store's own once it has waited longer
    than the store's timeout, and its locks go with it."""
    direct = postgres_store(postgres_url, timeout=TIMEOUT)
    task = direct.save(a_task())
    assert through.get(task["id"]) == task  # its connection made before the partition
    pid: list[int] = []
    url, _ = split_url(postgres_url)

    def waiting_mid_exchange() -> bool:
        with psycopg.connect(url, autocommit=True) as watcher:
            row = watcher.execute(
                "SELECT state, wait_event FROM pg_stat_activity WHERE pid = %s", (pid[0],)
            ).fetchone()
        return row == ("active", "ClientRead")

    def vanish() -> None:
        with (
            through.statements.connection() as conn,
            conn.pipeline() as pipeline,
            conn.cursor() as cursor,
        ):
            cursor.execute("BEGIN")
            cursor.execute("SELECT seq FROM tasks WHERE id = %s FOR UPDATE", (task["id"],))
            pipeline.sync()
            pid.append(conn.info.backend_pid)
            cursor.execute("UPDATE tasks SET seq = seq WHERE id = %s", (task["id"],))
            conn.pgconn.flush()  # sent without its Sync
            wait_for(waiting_mid_exchange, timeout=10, what="the server to wait mid-exchange")
            proxy.partition()
            cursor.execute("COMMIT")  # never arrives

    lost = threading.Thread(target=lambda: returned(vanish), daemon=True)
    lost.start()

    def moved() -> bool:
        direct.purge_expired()  # the reaper's upkeep, as each of its runs does it
        try:
            return transition(direct, task["id"], to_state(WORKING)).applied
        except StoreError:  # the row still locked: its lock timeout ran out
            return False

    wait_for(lambda: bool(pid), timeout=10, what="the lost write to begin")
    wait_for(moved, timeout=30, interval=0.5, what="the task's row to be free again")
    proxy.heal()
    lost.join(30)
    direct.close()
