"""Scenario: the store (Redis, store and broker; or PostgreSQL, cut off
behind a proxy) goes down under load, then comes back; and RabbitMQ, the
broker alone, goes away under load, then comes back (on each store).

While it is down the front end answers every request (with RabbitMQ down:
every send; reads are still answered) with a JSON-RPC error saying what is
unavailable (none hangs), and /readyz says 503. Once it returns the front
end serves again. Every task the store holds, whether or not its id
was handed out, ends completed, or failed with a reason; none is lost or
left working. Redis stays down until the load has had errors back (an
event, not a fixed time), and the deadlines here are generous outcomes, not
timings: how fast the errors come and how soon it serves again are measured
by bench/recovery.py.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from shared.store.contract import Store
from shared.task import COMPLETED, FAILED, state_of
from tests.support.a2a import readyz, wait_ready
from tests.support.compose import Backends, LocalStack, local_stack
from tests.support.fault_proxy import proxied, proxy_for
from tests.support.load import Load, error_kind, error_reply, succeeded
from tests.support.matrix import STORE_FIXTURES, selected
from tests.support.polling import wait_for
from tests.support.settled import saved_without_reply, wait_all_finished
from tests.support.store_outage import StoreOutage, store_outage_stack

# Generous deadlines inside (a loaded machine is slow, not wrong).
# On a RabbitMQ broker (TOOLNEXUS_TEST_MATRIX=full) only the store goes down:
# the store-outage scenario; the RabbitMQ test below takes the broker away.
pytestmark = [pytest.mark.timeout(360), pytest.mark.matrix]

SETTINGS = {
    "TOOLNEXUS_RUN": "examples.agents:slow",
    "TOOLNEXUS_CONCURRENCY": "2",
    "TOOLNEXUS_HEARTBEAT": "0.5",
    "TOOLNEXUS_STALE_AFTER": "8",
    "TOOLNEXUS_REAP_EVERY": "1",
}
ERRORS_DURING_OUTAGE = 5  # Redis comes back once the load has had this many


def start_services(stack: LocalStack) -> None:
    stack.start("web", WEB_CONCURRENCY="1")
    stack.start("worker")
    stack.start("beat")


@pytest.fixture
def stack(tmp_path: Path, backends: Backends) -> Iterator[StoreOutage]:
    with store_outage_stack(tmp_path, SETTINGS, backends) as prepared:
        start_services(prepared.stack)
        yield prepared


def test_a_store_outage_gives_clear_errors_and_loses_nothing(stack: StoreOutage) -> None:
    outage(
        stack.stack, stack.store, stack.take_away, stack.bring_back, stack.what, sends_only=False
    )


# Redis, and each other store the matrix selects (all with TOOLNEXUS_TEST_MATRIX=full).
BROKER_OUTAGE_STORES = sorted({"redis", *(c.store for c in selected(ci=False))})


@pytest.mark.parametrize("store_kind", BROKER_OUTAGE_STORES)
def test_a_rabbitmq_outage_refuses_sends_clearly_and_loses_nothing(
    tmp_path: Path, amqp_broker_url: str, store_kind: str, request: pytest.FixtureRequest
) -> None:
    """The broker alone goes away (RabbitMQ, through a proxy that is cut:
    the machine's server is shared); reads go on being answered."""
    fixture = STORE_FIXTURES[store_kind]
    store_url = None if fixture is None else str(request.getfixturevalue(fixture))
    with proxy_for(amqp_broker_url, 5672) as proxy:
        backends = Backends("amqp", proxied(amqp_broker_url, proxy.port), store_kind, store_url)
        with local_stack(tmp_path, SETTINGS, backends=backends) as (_, services):
            start_services(services)
            store = services.open_store()
            outage(services, store, proxy.refuse, proxy.start, "RabbitMQ", sends_only=True)


def outage(
    services: LocalStack,
    store: Store,
    stop: Callable[[], object],
    start: Callable[[], object],
    what: str,
    *,
    sends_only: bool,
) -> None:
    """Under load, take `what` away until the load has had errors, bring it
    back, and judge: clear errors, none hung, nothing lost or left working.
    `sends_only`: only sends need `what` (reads are still answered)."""
    url = services.web_url
    wait_ready(url)
    with Load(url) as load:
        wait_for(lambda: len(load.ids) >= 20, timeout=60, what="tasks under load")
        unanswered = saved_without_reply(store, "0.2 saved, never answered")
        stop()
        down_from = time.monotonic()
        assert wait_for(lambda: readyz(url) == 503, timeout=60, what="/readyz to say 503")
        judged = load.sends if sends_only else load.replies

        def errors_since_down() -> int:
            # Counted as `during` counts them below: begun after the first half second.
            settled = down_from + 0.5
            return sum(1 for s, _, r in list(judged) if s > settled and error_reply(r))

        # The outage itself: the load keeps running against it until it has
        # had errors back, however slowly this machine runs.
        wait_for(
            lambda: errors_since_down() >= ERRORS_DURING_OUTAGE,
            timeout=120,
            what=f"{ERRORS_DURING_OUTAGE} error replies while {what} is down",
        )
        down_until = time.monotonic()
        start()
        back_at = time.monotonic()
        wait_for(lambda: readyz(url) == 200, timeout=60, what=f"/readyz 200 after {what} returned")
        first_ok = wait_for(
            lambda: next((s for s, _, r in list(judged) if s > back_at and succeeded(r)), None),
            timeout=60,
            what=f"a successful request after {what} returned",
        )
        sent_before_stop = len(load.ids)
        wait_for(lambda: len(load.ids) > sent_before_stop + 5, timeout=60, what="load to resume")

    # Requests made wholly inside the outage (one still in flight when it
    # ended may rightly succeed), and every request begun during it.
    during = [(took, r) for s, took, r in judged if down_from + 0.5 < s and s + took < down_until]
    begun = [r for s, _, r in load.replies if down_from <= s <= back_at]
    errors = Counter(error_kind(r) for _, r in during)
    hung = [r for r in begun if isinstance(r, str)]
    ok = [r for _, r in during if succeeded(r)]
    final = wait_all_finished(store)
    states = Counter(state_of(t) for t in final.values())
    lost = [i for i in [*load.ids, unanswered] if i not in final]
    slowest = max((took for took, _ in during), default=0.0)
    print(
        f"\n{what} outage: {'sends' if sends_only else 'requests'} during it {len(during)}"
        f" (errors {dict(errors)}, hung {len(hung)}, answered {len(ok)}), slowest error"
        f" {slowest:.2f} s, serving again {first_ok - back_at:.2f} s after {what} returned;"
        f" tasks handed out {len(load.ids)}, stored {len(final)}, states {dict(states)},"
        f" lost {len(lost)} (figures from a shared machine; bench/recovery.py measures them)"
    )
    assert during, f"no request was answered while {what} was down"
    assert hung == [], hung[:3]
    assert ok == []
    for _, reply in during:
        assert isinstance(reply, dict)
        message = reply["error"]["message"]
        assert "task store unavailable" in message or "broker unavailable" in message, message
    assert lost == []
    assert set(states) <= {COMPLETED, FAILED}
    for task in final.values():
        if state_of(task) == FAILED:
            assert task["status"]["message"]["parts"][0]["text"]
    assert store.stale(float("inf")) == []
