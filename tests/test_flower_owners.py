"""Flower's `/owners` page (worker/runtime/flower_owners.py): every owner's
tasks held for their turn and in flight, and the live workers' slots, read
from the store's turn book, behind Flower's login.

The real Flower runs as compose runs it (`toolnexus-serve flower`, through
worker/runtime/flower_login.py) beside compose's web on a private Redis,
with no worker: no slots are registered, so the turn book's window is one
task, the first task sent is taken and every later one is held. First, the
Flower internals the page is added through, by name.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
import requests

from shared.owners.book import BookView, OwnerCount
from shared.settings import Settings
from tests.support.compose import LocalStack, local_stack
from tests.support.polling import wait_for
from worker.runtime.flower_owners import (
    OWNERS_PATH,
    BookReader,
    OwnersPage,
    add_owners_page,
    owners_page,
)

LOGIN = ("admin", "owners-pass")
# A token name with markup in it: the page must show it as text.
MARKED = "<i>eve</i>"
TOKENS = {"alice": "tok-alice", "bob": "tok-bob", MARKED: "tok-eve"}


def test_the_flower_internals_the_page_is_added_through_are_where_it_expects() -> None:
    """Flower has no API to add a page: the page goes into the handler list
    `flower.app.Flower` builds its application from, before its catch-all
    404. This fails by name if Flower moves any of that."""
    import flower.app
    import flower.urls
    from flower.views import BaseHandler
    from flower.views.error import NotFoundErrorHandler

    assert flower.app.default_handlers is flower.urls.handlers
    assert isinstance(flower.app.default_handlers, list)
    path, handler = flower.app.default_handlers[-1]
    assert (path, handler) == (r".*", NotFoundErrorHandler)
    assert issubclass(OwnersPage, BaseHandler)
    assert callable(BaseHandler.get_current_user)  # Flower's basic auth and OAuth
    # Flower's --url_prefix rewrites a (path, handler) pair as it does its own.
    assert flower.app.rewrite_handler((OWNERS_PATH, OwnersPage), "flower") == (
        "/flower/owners",
        OwnersPage,
    )
    handlers = list(flower.app.default_handlers)
    add_owners_page(handlers)
    add_owners_page(handlers)  # once
    assert handlers[-2:] == [(OWNERS_PATH, OwnersPage), flower.app.default_handlers[-1]]
    assert len(handlers) == len(flower.app.default_handlers) + 1


def test_the_page_escapes_owner_names_and_says_when_turns_are_off() -> None:
    view = BookView({MARKED: OwnerCount(2, 1), "": OwnerCount(0, 1)}, 100.0, 3)
    page = owners_page(view, now=160.0)
    assert "<i>" not in page and "&lt;i&gt;eve&lt;/i&gt;" in page
    assert "(no token)" in page and "3</strong> slots" in page and "waited 60 s" in page
    assert owners_page(None).count("Turns are off") == 1
    problem = owners_page(None, problem="down: <script>")
    assert "<script>" not in problem and "&lt;script&gt;" in problem


def test_the_store_is_opened_on_the_first_read_only() -> None:
    read: list[int] = []

    def settings() -> Settings:
        read.append(1)
        return Settings(store="memory")

    reader = BookReader(settings)
    assert read == []  # nothing opened before a request
    assert reader.view() == BookView({}, None, 0)
    reader.view()
    assert read == [1]
    off = BookReader(lambda: Settings(store="memory", fair_share=False))
    assert off.view() is None


class Table(HTMLParser):
    """The rows of the page's owners table: (owner as shown, held, in flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._in_body = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self.rows.append([])
        elif tag in ("th", "td") and self._in_body:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self._in_body = False
        elif tag in ("th", "td") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def counts_shown(html: str) -> dict[str, tuple[int, int]]:
    table = Table()
    table.feed(html)
    return {owner: (int(held), int(flying)) for owner, held, flying in table.rows}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    folder: Path = tmp_path_factory.mktemp("flower-owners")
    settings = {
        "FLOWER_BASIC_AUTH": ":".join(LOGIN),
        "TOOLNEXUS_API_TOKENS": ",".join(f"{name}:{token}" for name, token in TOKENS.items()),
    }
    with local_stack(folder, settings) as (_, started):
        started.start("web", WEB_CONCURRENCY="1")
        started.start("flower")
        # No beat, so no /readyz: the web's health is enough to send.
        wait_for(lambda: healthy(started.web_url), timeout=60, what="web to answer")
        yield started


def healthy(url: str) -> bool:
    try:
        return requests.get(f"{url}/healthz", timeout=2).status_code == 200
    except (requests.ConnectionError, requests.Timeout):
        return False


def send(stack: LocalStack, who: str) -> str:
    message = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": [{"text": "hi"}]}
    params = {"message": message, "configuration": {"returnImmediately": True}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {TOKENS[who]}"}
    reply = requests.post(stack.web_url, json=body, headers=headers, timeout=30).json()
    return str(reply["result"]["task"]["id"])


def owners(stack: LocalStack, auth: tuple[str, str] | None = LOGIN) -> requests.Response | None:
    try:
        return requests.get(f"{stack.flower_url}{OWNERS_PATH}", auth=auth, timeout=10)
    except requests.ConnectionError:
        return None  # Flower is not up yet


def test_the_owners_page_shows_every_owners_held_and_in_flight_tasks(stack: LocalStack) -> None:
    for who, many in (("alice", 3), ("bob", 2), (MARKED, 1)):
        for _ in range(many):
            send(stack, who)
    page = wait_for(lambda: owners(stack), timeout=60, what="Flower to answer")
    assert page.status_code == 200, page.text[:300]
    assert page.headers["Content-Type"].startswith("text/html")
    shown = counts_shown(page.text)
    # The window is one task (no worker's slots registered): Alice's first is
    # taken (on the broker, where no worker takes it), every other task held.
    assert shown == {"alice": (2, 1), "bob": (2, 0), MARKED: (1, 0)}
    assert "<i>eve</i>" not in page.text and "&lt;i&gt;eve&lt;/i&gt;" in page.text
    assert re.search(r'id="capacity">0</strong> slots', page.text)


def test_the_owners_page_wants_flowers_login(stack: LocalStack) -> None:
    # (A refused Response is falsy: wait for it in a list.)
    (anonymous,) = wait_for(
        lambda: [answer] if (answer := owners(stack, None)) is not None else None,
        timeout=60,
        what="Flower to answer",
    )
    assert anonymous.status_code == 401
    assert "held" not in anonymous.text.lower() and "alice" not in anonymous.text
    wrong = owners(stack, ("admin", "wrong"))
    assert wrong is not None and wrong.status_code == 401
    # Flower's own pages are refused alike, and allowed with the login.
    assert requests.get(f"{stack.flower_url}/workers", timeout=10).status_code == 401
    allowed = owners(stack)
    assert allowed is not None and allowed.status_code == 200


def test_a_worker_shows_its_slots_and_takes_every_held_task(stack: LocalStack) -> None:
    """Once a worker registers its slots the window opens: every held task
    is taken and run (the echo agent), and the page shows the slots."""
    stack.start("worker", TOOLNEXUS_CONCURRENCY="2")

    def drained() -> str | None:
        page = owners(stack)
        if page is None or page.status_code != 200:
            return None
        done = 'id="capacity">2</strong> slots' in page.text and counts_shown(page.text) == {}
        return page.text if done else None

    wait_for(drained, timeout=90, interval=0.5, what="the worker to take every held task")
