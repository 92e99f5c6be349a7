"""Fixtures every test module can use.

Redis: a private `redis-server` started once per session on a free port
(or `REDIS_URL` when set). RabbitMQ: a virtual host of the session's own
on the machine's server. Where either cannot be had its tests are skipped
with the reason printed; under `CI=true` they fail instead. The deployment
matrix (brokers x stores, tests/support/matrix.py) parametrizes the tests
marked `matrix`; `store_kind` runs a test once per store kind
(tests/support/store_kinds.py) and `stores` opens them.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, settings

from tests.support import matrix, store_kinds
from tests.support.compose import Backends, LocalStack
from tests.support.rabbitmq import NoRabbitMQ, Vhost
from tests.support.redis_server import RedisServer, ci, on_database

# Hypothesis times each example on the wall clock: a deadline (200 ms by
# default) and the too-slow health check. A loaded machine stretches any
# example past both, and the run fails (as a "flaky" test, its replay being
# fast) with every example right. The suite judges outcomes, not durations.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


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


# A `REDIS_URL` given from outside is one server for every xdist worker: each
# worker (gw0, gw1, ...) has a database of its own there, above those tests
# name themselves (compose's 0 and 1, 3, 5, 6), so no worker empties another's.
WORKER_DATABASES = range(8, 16)


def worker_database(worker: str | None) -> int | None:
    """The database of xdist worker `worker` (`PYTEST_XDIST_WORKER`) on a
    shared Redis; None without xdist."""
    if worker is None:
        return None
    if not (worker.startswith("gw") and worker[2:].isdigit()):
        raise pytest.UsageError(f"PYTEST_XDIST_WORKER={worker!r}: not an xdist worker name")
    index = int(worker[2:])
    if index >= len(WORKER_DATABASES):
        raise pytest.UsageError(
            f"REDIS_URL: at most {len(WORKER_DATABASES)} xdist workers share one Redis"
            f" (databases {WORKER_DATABASES[0]}-{WORKER_DATABASES[-1]}), not {worker}"
        )
    return WORKER_DATABASES[index]


@pytest.fixture
def redis_url(redis_server_url: str) -> Iterator[str]:
    """A Redis URL on a database emptied before the test. On our private
    server (one per xdist worker) it is database 0, and every database is
    emptied (tests also use db 1 and up). A `REDIS_URL` given from outside is
    shared by the xdist workers: each has a database of its own there
    (`worker_database`; without xdist, the URL's, else 0), and only that one
    is emptied."""
    url = f"{redis_server_url}/0" if redis_server_url.count("/") == 2 else redis_server_url
    if not os.environ.get("REDIS_URL"):
        client = redis.Redis.from_url(url)
        client.flushall()
    else:
        own = worker_database(os.environ.get("PYTEST_XDIST_WORKER"))
        if own is not None:
            url = on_database(url, own)
        client = redis.Redis.from_url(url)
        client.flushdb()
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


@pytest.fixture(scope="module")
def postgres_store_url(postgres_database: str) -> Iterator[str]:
    """The deployment matrix's PostgreSQL store (tests/support/matrix.py): a
    fresh, migrated schema for one module's stacks, dropped after it (the
    matrix's `backends` is module-scoped: a stack may outlive one test)."""
    from tests.support.postgres import fresh_schema

    with fresh_schema(postgres_database) as url:
        yield url


@pytest.fixture(scope="session")
def amqp_broker_url() -> Iterator[str]:
    """A virtual host of this pytest process's own on the machine's RabbitMQ
    (deleted at the end); each stack on it takes queue names of its own.
    No RabbitMQ here: skipped with the reason, under CI=true failed."""
    vhost = Vhost()
    try:
        vhost.create()
    except NoRabbitMQ as error:
        message = f"NO RABBITMQ: {error}; RabbitMQ tests skipped"
        if ci():
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield vhost.url
    finally:
        vhost.delete()


@pytest.fixture(params=store_kinds.ALL)
def store_kind(request: pytest.FixtureRequest) -> str:
    """Each store kind in turn (tests/support/store_kinds.py); narrowed with
    `@pytest.mark.parametrize("store_kind", store_kinds.SHARED)`."""
    return str(request.param)


@pytest.fixture
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[store_kinds.Stores]:
    """Stores of any kind for this test, closed when it ends."""
    opened = store_kinds.Stores(request, tmp_path)
    try:
        yield opened
    finally:
        opened.close()


SLOW_OPT_IN = (
    "OPT-IN, NOT RUN: marked slow (minutes of the suite's 10-minute budget, behaviour the rest"
    " of the suite covers more cheaply); run with -m slow; see docs/test-suite.md"
)


# The files that take longest, handed to the suite's workers first (a
# history beside a shorter file, so no two fleets of faults start at once):
# begun last, one of them would run on alone while the other workers wait.
# Every other file follows, the ones with more tests first.
LONGEST_FIRST = (
    "test_histories_amqp.py",
    "test_worker_pools.py",
    "test_histories.py",
    "test_broker_partition.py",
    "test_histories_postgresql.py",
    "test_newcomer.py",
    "test_histories_on_one_host.py",
    "test_worker_process.py",
    "test_histories_attempts.py",
    "test_failover_fleet.py",
    "test_reliability_retries.py",
    "test_fair_share.py",
    "test_reliability_worker_killed.py",
    # a fleet and an embedded server each, and Chromium: a minute, begun early
    "test_fleet_dashboard.py",
    "test_console_fleet_browser.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (`LONGEST_FIRST`); tests marked `slow` run only
    when asked for (`-m slow`), as the docker ones."""
    counts: dict[str, int] = {}
    for item in items:
        counts[item.path.name] = counts.get(item.path.name, 0) + 1

    def order(item: pytest.Item) -> tuple[int, int, str]:
        name = item.path.name
        if name in LONGEST_FIRST:
            return LONGEST_FIRST.index(name), 0, name
        return len(LONGEST_FIRST), -counts[name], name

    items.sort(key=order)  # stable: a file's own tests keep their order
    if "slow" in (config.getoption("markexpr") or ""):
        return
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.skip(reason=SLOW_OPT_IN))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test that used a compose stack reports the tail of each of the
    stack's process logs (web, beat, workers): what they did is the diagnosis,
    and in CI the stack's folder is gone by the time anyone reads the failure."""
    report = yield
    if report.failed and call.when != "teardown":
        for stack in _stacks(getattr(item, "funcargs", {})):
            report.sections.append((f"stack logs ({stack.folder})", stack.log_tails()))
    return report


def _stacks(funcargs: dict[str, object]) -> list[LocalStack]:
    """The LocalStacks among a test's fixture values (alone, or in a tuple)."""
    values = [
        part
        for value in funcargs.values()
        for part in (value if isinstance(value, tuple) else (value,))
    ]
    return list({id(v): v for v in values if isinstance(v, LocalStack)}.values())


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked `matrix` that take `backends` run once per selected
    combination (tests/support/matrix.py)."""
    if "combination" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("matrix")
    if marker is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: mark it @pytest.mark.matrix")
    combinations = matrix.selected(ci=bool(marker.kwargs.get("ci")))
    metafunc.parametrize("combination", combinations, ids=str, scope="module")


@pytest.fixture(scope="module")
def backends(combination: matrix.Combination, request: pytest.FixtureRequest) -> Backends:
    """The broker and store URLs of this combination (None: the stack's Redis)."""

    def url(fixture: str | None) -> str | None:
        return None if fixture is None else str(request.getfixturevalue(fixture))

    return Backends(
        broker_kind=combination.broker,
        broker_url=url(matrix.BROKER_FIXTURES[combination.broker]),
        store_kind=combination.store,
        store_url=url(matrix.STORE_FIXTURES[combination.store]),
    )
