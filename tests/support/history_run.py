"""One checked history: a fleet, recording clients, a nemesis, the checker.

The fleet is compose.yaml's services run here (`LocalStack`: the front end
under gunicorn, the gRPC process, two Celery workers, beat) on one of four
deployments, every server of it the run's own:

| backend | store | broker | the faulted link |
|---|---|---|---|
| redis | a Redis | the same Redis | Redis (store and broker) |
| postgresql | a PostgreSQL | a Redis | PostgreSQL |
| file | a directory | a Redis | Redis (the broker) |
| sqlite | a SQLite database | a Redis | Redis (the broker) |
| amqp | a Redis | a RabbitMQ | RabbitMQ |

The faulted link runs through a `FaultProxy`: latency with jitter, every
connection cut, a black hole, one way only, a partition that loses every
open connection for good (lasting past PostgreSQL's statement timeout), and a
store outage past the workers' slot registrations (the store's link
refused; on the file and SQLite stores, the database's write lock held by
another process). Process faults: a worker
SIGKILLed (and started again), a prefork pool child SIGKILLed (Celery
starts another), a worker SIGSTOPped past the stale threshold (then
SIGCONT), the front end, the gRPC process and beat SIGKILLed (and started
again) and SIGSTOPped (then SIGCONT), and the store and the broker
SIGKILLed and started again on their data (Redis: AOF, fsync always;
PostgreSQL: its WAL; RabbitMQ: its quorum queues).

After the faults every fault is healed and every process runs again; the
clients go on until every kind of operation the checker judges has happened
(a loaded machine may not have asked and answered a question during the
faults), then finish what they were doing, the fleet settles (each acknowledged
task ends, or the settle time passes), each task is read once more through
the front end, the webhooks get the time to hear every end, and `check`
judges the whole history.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc
import pytest
import requests

from tests.support.a2a import wait_ready
from tests.support.agents import scripted_fleet
from tests.support.compose import Backends, LocalStack, compose_redis, dotenv_for, start_grpc
from tests.support.fault_proxy import FaultProxy, proxied, proxy_for
from tests.support.file_locks import hold_locks
from tests.support.history import (
    TERMINAL,
    Deliveries,
    History,
    attempts_made,
    check,
    hooked,
    pushed_state,
    state_of,
    summary,
)
from tests.support.history_clients import Clients, expected_result
from tests.support.nemesis import Fault, Heal, Nemesis
from tests.support.ports import free_port
from tests.support.postgres_server import PrivatePostgres
from tests.support.rabbitmq import NoRabbitMQ, PrivateServer
from tests.support.redis_server import ci
from tests.support.webhook_receiver import Receiver

BACKENDS = ("redis", "postgresql", "file", "sqlite", "amqp")
STALE_AFTER = 3.0
# Once healed, the fleet is stuck when no acknowledged task has ended for
# this long while some have not.
STUCK = 45.0
SETTLE = 60.0  # seconds the webhooks have, once the tasks settled, to hear every end
# Seconds the clients go on after the faults until every kind of operation happened.
COVERED = 90.0
# A partition outlasts PostgreSQL's statement timeout (TOOLNEXUS_PG_TIMEOUT,
# 5 s in these fleets, as quick as their other settings) and every store's
# own timeout; an outage outlasts a worker's slot registration
# (TOOLNEXUS_STALE_AFTER), so registrations lapse.
PG_TIMEOUT = 5.0
PARTITION = (6.0, 8.0)
OUTAGE = (STALE_AFTER + 1.5, STALE_AFTER + 3.0)


@dataclass
class Outcome:
    history: History
    anomalies: dict[str, list[str]]
    schedule: str
    line: str  # one line: the backend, operations, faults, anomalies


class _Server(Protocol):
    """A server of the run's own, killed and started again on its data."""

    def kill(self) -> None: ...
    def start(self) -> object: ...


@dataclass
class Fleet:
    stack: LocalStack
    proxy: FaultProxy
    servers: dict[str, _Server]  # fault name -> the server it SIGKILLs
    runs: Path
    grpc_port: int
    backend: str
    folder: Path

    @property
    def grpc_target(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"


def run_history(
    folder: Path, backend: str, seconds: float, seed: int, attempts: int = 1
) -> Outcome:
    """Run one history of about `seconds` of faults on `backend` (one of
    BACKENDS), its fleet giving each turn of a task `attempts` runs."""
    history = History()
    receiver = Receiver().start()
    with history_fleet(folder, backend, seed, attempts) as fleet:
        clients = Clients(
            fleet.stack.web_url,
            history,
            seed=seed,
            receiver=receiver,
            grpc_target=fleet.grpc_target,
        )
        nemesis = Nemesis(_faults(fleet), history, seed)
        try:
            clients.start()
            _wait(lambda: len(history.acknowledged()) >= 10, 60, "the first acknowledged tasks")
            # Faults begin once the workers consume (a run logged: their queues
            # are declared). A RabbitMQ killed while it creates a quorum queue
            # can keep that queue leaderless for good (a stated limit,
            # docs/promises.md): a fault of the deployment's setup, not of a
            # fleet at work.
            _wait(lambda: fleet.runs.exists() and fleet.runs.stat().st_size > 0, 60, "a run")
            nemesis.run(seconds)
            _revive(fleet)
            healed = time.monotonic()
            time.sleep(2.0)  # the clients' last operations meet the healed fleet
            # A loaded machine may get through the faults before a question was
            # asked and answered: the clients go on, on the healed fleet, until
            # every kind of operation the checker judges has happened.
            _wait(lambda: _covered(history), COVERED, "every kind of operation")
            clients.close()
            final = _settled(fleet.stack.web_url, list(history.acknowledged()))
            settled = time.monotonic() - healed
            deliveries = _delivered(receiver, history, final)
        except BaseException:
            print(fleet.stack.log_tails(60))
            raise
        finally:
            nemesis.stop.set()
            clients.stop.set()
            receiver.stop()
        logged = fleet.runs.read_text(encoding="utf-8") if fleet.runs.exists() else ""
        runs = Counter(line.rpartition("\t")[0] for line in logged.splitlines())
        texts = [*history.acknowledged().values(), *history.replies().values()]
        expected = {text: expected_result(text) for text in texts}
        anomalies = check(history, final, runs, expected, deliveries, attempts)
        if anomalies:
            print(fleet.stack.log_tails(40))
    history.dump(folder / "history.jsonl")
    # Measured, not asserted: how long the last acknowledged task took to end
    # once every fault was healed (the clients' last sends included).
    ended = f"tasks settled {settled:.1f} s after the faults were healed"
    deployment = backend
    if attempts > 1:
        again = sum(1 for task in final.values() if task is not None and attempts_made(task) > 1)
        deployment = f"{backend} with {attempts} attempts ({again} task(s) run again)"
    line = f"{deployment}: {summary(history, anomalies, deliveries)}; {ended}"
    return Outcome(history, anomalies, nemesis.describe(), line)


@contextmanager
def history_fleet(folder: Path, backend: str, seed: int, attempts: int = 1) -> Iterator[Fleet]:
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: one of {BACKENDS}")
    runs = folder / "runs.log"
    settings = {
        **scripted_fleet(runs, stale_after=STALE_AFTER),
        "TOOLNEXUS_PG_TIMEOUT": f"{PG_TIMEOUT:g}",
        "TOOLNEXUS_MAX_ATTEMPTS": str(attempts),
        # as quick as the fleet's other settings: a retry within a second
        "TOOLNEXUS_RETRY_BACKOFF": "0.2",
        "TOOLNEXUS_RETRY_BACKOFF_MAX": "1",
        "TOOLNEXUS_DRAIN_TIMEOUT": "2",
    }
    dotenv = dotenv_for(settings, secrets.token_hex(16))
    with ExitStack() as cleanup:
        redis = compose_redis(dotenv, appendonly=True).start()  # fsync at every write
        cleanup.callback(redis.close)
        servers: dict[str, _Server] = {}
        backends = Backends()
        if backend == "postgresql":
            postgres = PrivatePostgres()
            cleanup.callback(postgres.close)
            # A partition leaves the sessions of the connections it lost on the
            # server (the proxy answers their keepalives): room for them.
            store_url = postgres.initdb("max_connections = 1000\n").start().migrated()
            proxy = proxy_for(store_url, 5432, seed=seed)
            backends = Backends(store_kind="postgresql", store_url=proxied(store_url, proxy.port))
            servers["store SIGKILL"] = postgres
        elif backend == "amqp":
            rabbit = _private_rabbitmq()
            cleanup.callback(rabbit.close)
            proxy = proxy_for(rabbit.url, 5672, seed=seed)
            backends = Backends(broker_kind="amqp", broker_url=proxied(rabbit.url, proxy.port))
            servers["store SIGKILL"] = redis
            servers["broker SIGKILL"] = rabbit
        else:  # Redis: the store and the broker, or the file store's broker
            proxy = proxy_for(redis.url, 6379, seed=seed)
            servers["store SIGKILL" if backend == "redis" else "broker SIGKILL"] = redis
        cleanup.enter_context(proxy)  # started
        on_redis = backend in ("redis", "file", "sqlite")
        redis_url = proxied(redis.url, proxy.port) if on_redis else redis.url
        stack = LocalStack(redis_url, folder, dotenv, backends)
        cleanup.callback(stack.close)
        local = {"file": f"file:{folder / 'tasks'}", "sqlite": f"sqlite:///{folder / 'tasks.db'}"}
        if backend in local:
            for environment in stack.environments.values():
                environment["TOOLNEXUS_STORE"] = local[backend]
        fleet = Fleet(stack, proxy, servers, runs, free_port(), backend, folder)
        for name in PROCESSES:
            _start(fleet, name)
        wait_ready(stack.web_url)
        _wait_grpc(fleet.grpc_target)
        yield fleet


def _private_rabbitmq() -> PrivateServer:
    """A RabbitMQ of the run's own (the machine's serves others, and is not
    killed); none to be had: skipped with the reason, under CI=true failed."""
    try:
        return PrivateServer().start()
    except NoRabbitMQ as error:
        message = f"NO RABBITMQ SERVER of our own: {error}; the amqp history"
        if ci():
            pytest.fail(f"{message} cannot run under CI=true")
        pytest.skip(f"{message} is skipped")


PROCESSES = ("web", "grpc", "beat", "worker-a", "worker-b")


def _start(fleet: Fleet, name: str) -> None:
    stack = fleet.stack
    if name == "web":
        stack.start("web", WEB_CONCURRENCY="1")
    elif name == "grpc":
        start_grpc(stack, fleet.grpc_port)
    elif name == "beat":
        stack.start("beat")
    else:
        stack.start("worker", as_name=name, args=[f"--hostname={name}@%h"])


def _wait_grpc(target: str) -> None:
    with grpc.insecure_channel(target) as channel:
        grpc.channel_ready_future(channel).result(timeout=60)


def _faults(fleet: Fleet) -> list[Fault]:
    proxy, stack = fleet.proxy, fleet.stack

    def on_link(apply: Callable[[], None]) -> Callable[[], Heal]:
        def inject() -> Heal:
            apply()
            return proxy.heal

        return inject

    def killed(name: str) -> Callable[[], Heal]:
        def inject() -> Heal:
            stack.processes[name].kill()
            return lambda: _start(fleet, name)

        return inject

    def paused(name: str) -> Callable[[], Heal]:
        def inject() -> Heal:
            group = stack.processes[name].process.pid  # the process and its pool
            os.killpg(group, signal.SIGSTOP)
            return lambda: os.killpg(group, signal.SIGCONT)

        return inject

    def pool_child_killed() -> Heal:
        group = stack.processes["worker-a"].process.pid
        children = [pid for pid in _group(group) if pid != group]
        if children:
            os.kill(children[0], signal.SIGKILL)  # Celery starts another
        return lambda: None

    def refused() -> Heal:
        proxy.refuse()

        def heal() -> None:
            proxy.heal()
            proxy.start()

        return heal

    faults = [
        Fault("latency", on_link(lambda: proxy.slow(0.05, 0.04)), (1.0, 2.5)),
        Fault("cut", on_link(proxy.cut), (0.0, 0.2)),
        Fault("black hole", on_link(proxy.black_hole), (1.0, 2.5)),
        Fault("one way", on_link(proxy.one_way), (1.0, 2.5)),
        Fault("partition", on_link(proxy.partition), PARTITION),
        Fault("worker SIGKILL", killed("worker-a"), (0.5, 1.5)),
        Fault(
            "worker SIGSTOP past stale", paused("worker-b"), (STALE_AFTER + 1.0, STALE_AFTER + 2.0)
        ),
        Fault("front end SIGSTOP", paused("web"), (0.5, 2.0)),
        Fault("gRPC SIGSTOP", paused("grpc"), (0.5, 2.0)),
        Fault("beat SIGSTOP", paused("beat"), (1.0, 3.0)),
        Fault("front end SIGKILL", killed("web"), (0.2, 1.0)),
        Fault("beat SIGKILL", killed("beat"), (0.5, 1.5)),
        Fault("gRPC SIGKILL", killed("grpc"), (0.2, 1.0)),
        Fault("pool child SIGKILL", pool_child_killed, (0.0, 0.5)),
    ]
    if fleet.backend in ("redis", "postgresql"):
        faults.append(Fault("store outage", refused, OUTAGE))
    elif fleet.backend == "file":
        faults.append(Fault("store outage", _locks_held(fleet.folder / "tasks"), OUTAGE))
    elif fleet.backend == "sqlite":
        faults.append(Fault("store outage", _locks_held(fleet.folder / "tasks.db"), OUTAGE))
    for name, server in fleet.servers.items():
        faults.append(Fault(name, _killed_on_its_data(server), (0.5, 2.0)))
    return faults


def _locks_held(directory: Path) -> Callable[[], Heal]:
    """The file or SQLite store's outage: another process holds the
    database's write lock (as one paused mid-write would), until it is
    killed (`directory`: the file store's, or the SQLite store's database)."""

    def inject() -> Heal:
        holder = hold_locks(directory)

        def heal() -> None:
            holder.kill()
            holder.wait()

        return heal

    return inject


def _killed_on_its_data(server: _Server) -> Callable[[], Heal]:
    def heal() -> None:
        server.start()  # on its data

    def inject() -> Heal:
        server.kill()
        return heal

    return inject


def _group(group: int) -> list[int]:
    """The processes of a process group (a worker and its pool), in pid order."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == group:
                    found.append(int(entry.name))
            except ProcessLookupError:
                continue
    return sorted(found)


def _revive(fleet: Fleet) -> None:
    """Every fault healed and every process running (a restarted one may have
    died of a fault that followed)."""
    fleet.proxy.heal()
    for name in PROCESSES:
        process = fleet.stack.processes.get(name)
        if process is None or not process.alive():
            _start(fleet, name)
    # Serving, not ready: a reaper run re-sending a backlog can hold /readyz
    # at 503 (reaper overdue) while the front end answers every request.
    _wait(lambda: _answers(fleet.stack.web_url), 60, "the front end to answer")
    _wait_grpc(fleet.grpc_target)


def _answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=5).status_code == 200
    except requests.RequestException:
        return False


def _settled(url: str, task_ids: list[str]) -> dict[str, dict[str, Any] | None]:
    """Each task as the front end answers it once it ended, or once the fleet
    is stuck: no task ended for STUCK seconds while some had not (a slow
    machine that still ends tasks is given the time it needs)."""
    final: dict[str, dict[str, Any] | None] = {}
    progress = time.monotonic()
    pending = list(task_ids)
    while pending:
        waiting = []
        for task_id in pending:
            task = _get(url, task_id)
            final[task_id] = task
            if task is not None and state_of(task) not in {*TERMINAL, "input-required"}:
                waiting.append(task_id)
        if len(waiting) < len(pending):
            progress = time.monotonic()
        pending = waiting
        if pending:
            if time.monotonic() - progress > STUCK:
                break
            time.sleep(0.5)
    return final


def _delivered(
    receiver: Receiver, history: History, final: dict[str, dict[str, Any] | None]
) -> Deliveries:
    """What each webhook was sent, once every ended task's end was (or SETTLE passed)."""

    deleted = {op.value["hook"] for op in history.of("unhook")}

    def deliveries() -> dict[str, list[tuple[int, str, float]]]:
        return {
            hook: [
                (int(hit.headers.get("x-a2a-event-id", "-1")), pushed_state(hit.body), hit.at)
                for hit in receiver.delivered(hook)
            ]
            for hook in hooked(history)
        }

    def unheard() -> list[str]:
        found = deliveries()
        return [
            hook
            for hook, task_id in hooked(history).items()
            if hook not in deleted
            and (task := final.get(task_id)) is not None
            and state_of(task) in TERMINAL
            and state_of(task) not in {state for _, state, _ in found[hook]}
        ]

    deadline = time.monotonic() + SETTLE
    while unheard() and time.monotonic() < deadline:
        time.sleep(0.5)
    return deliveries()


def _get(url: str, task_id: str) -> dict[str, Any] | None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": task_id}}
    for _ in range(20):
        try:
            reply = requests.post(f"{url}/", json=body, timeout=10).json()
        except (requests.RequestException, ValueError):
            time.sleep(0.5)
            continue
        if "result" in reply:
            return dict(reply["result"])
        if reply.get("error", {}).get("code") == -32001:
            return None  # not found
        time.sleep(0.5)
    raise AssertionError(f"the front end answered no read of task {task_id}")


def _covered(history: History) -> bool:
    """Whether the history holds a listing, a stream, a webhook asked for and
    a question answered: what every history must have for its checks to mean
    something (tests/support/history_check.py)."""
    return bool(
        history.of("list") and history.of("stream") and hooked(history) and history.replies()
    )


def _wait(probe: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)
