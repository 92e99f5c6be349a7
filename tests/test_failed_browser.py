"""The console's failed view in headless Chromium: failed tasks grouped by
reason, and a click that runs one (or a group) again.

Against `toolnexus-serve` (the embedded server, its in-process workers
running tests/support/triage_agent.py) with three principals: alice and bob
callers, root the administrator (TOOLNEXUS_ADMIN_TOKENS); and once against
compose.yaml's services (gunicorn, a Celery worker with a short time limit,
beat, Redis) with the console on. A rerun's task is checked through the API:
a new task, completed by a worker, referencing the failed one. The run saves
a screenshot of the view into docs/img/ (docs/console.md shows it).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.a2a import wait_ready
from tests.support.browser import chromium
from tests.support.compose import local_stack
from tests.support.embedded import embedded_server
from tests.test_failed_triage import COMPLETED, FAILED, TOKENS, call, failed_look, send, settled

try:
    from playwright.sync_api import expect
except ImportError:  # the test extra installs it
    from tests.support.redis_server import ci

    if ci():
        raise
    pytest.skip("NO PLAYWRIGHT: pip install -e '.[test]'", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
SHOT = ROOT / "docs" / "img" / "console-failed.png"
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)
USERS = ",".join(f"{who}:{token}" for who, token in TOKENS.items())


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {
        "TOOLNEXUS_RUN": "tests.support.triage_agent:run",
        "TOOLNEXUS_API_TOKENS": USERS,
        "TOOLNEXUS_ADMIN_TOKENS": "root",
    }
    with embedded_server(tmp_path_factory.mktemp("failed-view"), env) as (host, port):
        yield f"http://{host}:{port}"


class Tab:
    """One tab of its own, signed in on the failed view, failing on any page
    error or Content-Security-Policy report."""

    def __init__(self, browser: Any, base: str, who: str) -> None:
        self.context = browser.new_context()
        self.page = self.context.new_page()
        self.page.set_default_timeout(WAIT_MS)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("console", self._message)
        self.page.goto(f"{base}/console/failed")
        self.page.fill("#token", TOKENS[who])
        self.page.click("#sign-in button")
        self.page.wait_for_selector("#signed-in:not([hidden])")
        expect(self.page.locator("#failed-status")).to_have_text(re.compile("failed tasks"))

    def _message(self, message: Any) -> None:
        if "Content Security Policy" in message.text or "Trusted Type" in message.text:
            self.errors.append(message.text)

    def group(self, name: str) -> Any:
        return self.page.locator(f'section.failure-group[data-group="{name}"]')

    def rerun_shown(self) -> str:
        """The new task's id the page shows after a rerun."""
        link = self.page.locator("#rerun-result a.rerun").first
        expect(link).to_be_visible()
        return str(link.inner_text())

    def close(self) -> None:
        self.context.close()
        assert self.errors == []


def test_a_caller_sees_its_own_groups_and_reruns_a_task_with_a_click(
    browser: Any, embedded: str
) -> None:
    mine = [send(embedded, "alice", f"value number {n}") for n in range(2)]
    theirs = send(embedded, "bob", "key of bob's")
    for task_id in mine:
        settled(embedded, "alice", task_id, FAILED)
    settled(embedded, "bob", theirs, FAILED)

    tab = Tab(browser, embedded, "alice")
    try:
        group = tab.group("exception: ValueError")
        expect(group.locator(".count")).to_have_text("2")
        expect(group.locator("tbody tr")).to_have_count(2)
        expect(tab.group("exception: KeyError")).to_have_count(0)  # bob's, not hers
        expect(tab.page.locator("th", has_text="Owner")).to_have_count(0)
        tab.page.screenshot(path=str(SHOT), full_page=True)

        row = group.locator("tbody tr", has_text=mine[0])
        row.locator("button.rerun-one").click()
        new = tab.rerun_shown()
        done = settled(embedded, "alice", new, COMPLETED)
        assert done["history"][0]["referenceTaskIds"] == [mine[0]]
        assert (
            call(embedded, "alice", "GetTask", {"id": mine[0]})["result"]["status"]["state"]
            == FAILED
        )
    finally:
        tab.close()


def test_the_administrator_sees_every_owner_and_reruns_a_whole_group(
    browser: Any, embedded: str
) -> None:
    theirs = [send(embedded, "bob", f"key group {n}") for n in range(2)]
    for task_id in theirs:
        settled(embedded, "bob", task_id, FAILED)

    tab = Tab(browser, embedded, "root")
    try:
        group = tab.group("exception: KeyError")
        expect(group.locator("tbody tr", has_text=theirs[0])).to_contain_text("bob")
        expect(tab.page.locator("th", has_text="Owner").first).to_be_visible()
        count = int(group.locator(".count").inner_text())
        looked = failed_look(embedded, "root").json()["groups"]
        ids = next(set(g["ids"]) for g in looked if g["group"] == "exception: KeyError")
        assert count == len(ids) and set(theirs) <= ids
        group.locator("button.rerun-group").click()
        expect(tab.page.locator("#rerun-result")).to_contain_text(f"Ran {count} tasks again")
        links = tab.page.locator("#rerun-result a.rerun").all_inner_texts()
        assert len(links) == count
        for new in links:  # bob's, as the failed ones were
            assert (
                settled(embedded, "bob", new, COMPLETED)["history"][0]["referenceTaskIds"][0] in ids
            )
    finally:
        tab.close()


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """compose.yaml's web (gunicorn, gevent), worker and beat on a private
    Redis, the console on, and a two-second time limit on the worker."""
    folder = tmp_path_factory.mktemp("failed-deployed")
    overrides = {
        "TOOLNEXUS_CONSOLE": "true",
        "TOOLNEXUS_RUN": "tests.support.triage_agent:run",
        "TOOLNEXUS_API_TOKENS": USERS,
        "TOOLNEXUS_ADMIN_TOKENS": "root",
        "TOOLNEXUS_TIME_LIMIT": "2",
    }
    with local_stack(folder, overrides) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("worker", PYTHONPATH=str(ROOT))
        stack.start("beat", PYTHONPATH=str(ROOT))
        wait_ready(stack.web_url)
        yield stack.web_url


def test_on_the_fleet_a_timed_out_task_is_grouped_and_rerun_by_a_worker(
    browser: Any, deployed: str
) -> None:
    slow = send(deployed, "alice", "slow on the fleet")
    wrong = send(deployed, "alice", "value on the fleet")
    theirs = send(deployed, "bob", "key of bob's on the fleet")
    settled(deployed, "alice", slow, FAILED)
    settled(deployed, "alice", wrong, FAILED)
    settled(deployed, "bob", theirs, FAILED)
    # Each caller its own, over the fleet's shared store; the administrator every owner's.
    alice = {i for g in failed_look(deployed, "alice").json()["groups"] for i in g["ids"]}
    root = {i for g in failed_look(deployed, "root").json()["groups"] for i in g["ids"]}
    assert alice == {slow, wrong} and root >= {slow, wrong, theirs}

    tab = Tab(browser, deployed, "root")
    try:
        expect(tab.group("timed-out").locator("tbody tr", has_text=slow)).to_contain_text("alice")
        expect(
            tab.group("exception: ValueError").locator("tbody tr", has_text=wrong)
        ).to_be_visible()
        tab.group("timed-out").locator("tbody tr", has_text=slow).locator(
            "button.rerun-one"
        ).click()
        new = tab.rerun_shown()
        done = settled(deployed, "alice", new, COMPLETED)  # a Celery worker ran it
        assert done["history"][0]["referenceTaskIds"] == [slow]
        assert (
            done["contextId"]
            == call(deployed, "alice", "GetTask", {"id": slow})["result"]["contextId"]
        )
    finally:
        tab.close()
