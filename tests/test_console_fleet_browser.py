"""The fleet page in headless Chromium (Debian's, driven by Playwright),
against `toolnexus-serve` (the embedded server) with its worker threads
running tests/support/fleet_agent.py, and three principals: alice and bob
(callers) and root (an administrator).

Tasks are sent with the official a2a-sdk client while the page is open; the
charts must draw what `/console/fleet.json` says: a canvas per chart, the
runs per second of the same samples, the workers and slots now. The page
runs under the console's Content-Security-Policy (no inline script,
Trusted Types required): any violation fails the test. The run saves a
screenshot into docs/img/ (docs/console.md shows it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.browser import chromium
from tests.support.embedded import embedded_server
from tests.support.fleet_page import CHARTS, FleetTab
from tests.support.redis_server import ci
from tests.test_console_browser import _sdk_send

try:
    from playwright.sync_api import expect
except ImportError:  # the test extra installs it
    if ci():
        raise
    pytest.skip("NO PLAYWRIGHT: pip install -e '.[test]'", allow_module_level=True)

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "docs" / "img"
TOKENS = {"alice": "alice-token", "bob": "bob-token", "root": "root-token"}
WAIT_MS = 30_000
expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("fleet-browser")
    env = {
        "TOOLNEXUS_RUN": "tests.support.fleet_agent:run",
        "TOOLNEXUS_API_TOKENS": ",".join(f"{who}:{token}" for who, token in TOKENS.items()),
        "TOOLNEXUS_ADMIN_TOKENS": "root",
        "TOOLNEXUS_CONCURRENCY": "2",
        "TOOLNEXUS_FLEET_SAMPLE_EVERY": "1",  # a sample a second: the test needs a few
    }
    with embedded_server(folder, env) as (host, port):
        yield f"http://{host}:{port}"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


def send(base: str, who: str, *texts: str) -> None:
    """Each text as a task, sent with the official SDK on a thread of its own
    (Playwright's sync API keeps this one's event loop)."""

    async def all_of() -> None:
        await asyncio.gather(*(_sdk_send(base, TOKENS[who], text) for text in texts))

    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, all_of()).result()


def fleet_json(base: str, who: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {TOKENS[who]}"}
    reply = requests.get(f"{base}/console/fleet.json", headers=headers, timeout=10)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def test_the_charts_draw_what_the_fleet_data_says(base: str, browser: Any) -> None:
    tab = FleetTab(browser, base, TOKENS["root"])
    try:
        tab.wait_samples(1)
        send(base, "alice", *["sleep 0.3"] * 4)
        send(base, "bob", "fail", "fail")
        # Longer than a sample's interval, more than the slots: in flight, some held.
        send(base, "alice", *["sleep 2"] * 4)

        def shown() -> bool:
            rates, owners = tab.series("rates"), tab.series("owners")
            ended = {label for label, column in rates.items() if any(column)}
            flying = owners.get("alice in flight", [])
            return {"completed", "failed"} <= ended and max(flying, default=0) >= 1

        tab.wait_until(shown, "the runs and alice's tasks in flight drawn")
        page = tab.page
        for chart in CHARTS:
            expect(page.locator(f"#chart-{chart} canvas")).to_have_count(1)
        rates = tab.drawn("rates")
        assert {"completed", "failed"} <= set(rates["labels"])
        answer = fleet_json(base, "root")
        by_time = {point["t"]: point for point in answer["points"]}
        times, columns = rates["data"][0], rates["data"][1:]
        assert len(times) >= 5
        # Every point the page drew is one of the server's, drawn as it says.
        drawn_any = False
        for index, t in enumerate(times):
            point = by_time[t]
            for label, column in zip(rates["labels"], columns, strict=True):
                if point["rates"] is None:
                    assert column[index] is None
                    continue
                assert column[index] == pytest.approx(point["rates"].get(label, 0))
                drawn_any = drawn_any or column[index] > 0
        assert drawn_any, rates
        latency = tab.drawn("latency")
        assert any(value is not None and value >= 0.25 for value in latency["data"][2])  # p99
        newest = answer["points"][-1]
        expect(page.locator("#now-workers")).to_have_text(
            f"{newest['workers']} / {newest['slots']}"
        )
        assert newest["workers"] == 1 and newest["slots"] == 2
        expect(page.locator("#worker-table tbody tr")).to_have_count(1)
        expect(page.locator("#worker-table")).to_contain_text(next(iter(answer["workerSlots"])))
        assert {"alice held", "alice in flight"} <= set(tab.drawn("owners")["labels"])
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "console-fleet.png"), full_page=True)
    finally:
        tab.close()


def test_a_caller_sees_only_its_own_line_and_no_worker_names(base: str, browser: Any) -> None:
    tab = FleetTab(browser, base, TOKENS["alice"])
    try:
        tab.wait_samples(1)
        owners = tab.drawn("owners")["labels"]
        assert owners == ["alice held", "alice in flight"]
        assert tab.page.locator("#worker-table").is_hidden()
        assert "bob" not in tab.page.content()
    finally:
        tab.close()
