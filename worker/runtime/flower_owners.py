"""Flower's `/owners` page: every owner's tasks waiting in the turn book for
their turn (held) and taken from it (in flight: on the broker or running),
and the live workers' slots (`shared.owners.book.BookView`).

The page is added to Flower's own handlers (`add_owners_page`, before
`worker.runtime.flower_login` runs Flower), so it sits behind Flower's login
like every other page (Tornado's `authenticated`, Flower's basic auth or
OAuth) and under its `--url_prefix`. It reads the store's turn book, the
store opened from the TOOLNEXUS_* settings as a worker opens it, on the
first request (so Flower starts whether or not the store answers), each read
on Flower's executor, not its event loop. It is a plain HTML table; owner
names (token names, JWT subjects) are escaped.

Flower has no API for adding a page: this relies on `flower.app` building
its application from the module's `default_handlers` list, whose last entry
is its catch-all 404 handler, and on `flower.views.BaseHandler`;
tests/test_flower_owners.py fails by name if either moves.
"""

from __future__ import annotations

import html
import threading
import time
from collections.abc import Callable, MutableSequence
from typing import Any, Final

import tornado.web
from flower import app as flower_app
from flower.views import BaseHandler
from tornado.ioloop import IOLoop

from shared.errors import StoreError
from shared.owners.book import BookView, TurnBook
from shared.owners.turns import takes_turns
from shared.settings import Settings
from shared.store.wiring import abilities_of, open_store

OWNERS_PATH: Final = "/owners"
# The book as the page shows it: None when turns are off.
Reader = Callable[[], BookView | None]


class BookReader:
    """The turn book of the store the settings name, opened on first use;
    None from `view` when turns are off (no fair share and no running cap,
    or a store that keeps no book)."""

    def __init__(self, settings: Callable[[], Settings] = Settings.from_env) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._opened = False
        self._book: TurnBook | None = None

    def view(self) -> BookView | None:
        with self._lock:
            if not self._opened:
                settings = self._settings()
                book = abilities_of(open_store(settings)).turn_book
                self._book = book if takes_turns(settings) else None
                self._opened = True
        return None if self._book is None else self._book.view()


_READER = BookReader()


class OwnersPage(BaseHandler):  # type: ignore[misc]  # Flower's handlers are untyped
    """`GET /owners`, behind Flower's login."""

    reader: Reader = _READER.view

    @tornado.web.authenticated
    async def get(self) -> None:
        self.set_header("Cache-Control", "no-store")
        self.set_header("Content-Type", "text/html; charset=utf-8")
        try:
            view = await IOLoop.current().run_in_executor(None, type(self).reader)
        except StoreError as error:
            self.set_status(503)
            self.finish(owners_page(None, problem=f"The task store did not answer: {error}"))
            return
        self.finish(owners_page(view))


def owners_page(
    view: BookView | None, *, problem: str | None = None, now: float | None = None
) -> str:
    """The page: every owner's counts as a table, or why there are none."""
    if problem is not None:
        body = f"<p>{html.escape(problem)}</p>"
    elif view is None:
        body = (
            "<p>Turns are off (TOOLNEXUS_FAIR_SHARE=false and no running cap, or a store that"
            " keeps no turn book): every accepted task goes to the broker at once.</p>"
        )
    else:
        body = _table(view, time.time() if now is None else now)
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        "<title>Owners · Flower</title>\n</head>\n<body>\n<h1>Owners</h1>\n"
        f"{body}\n</body>\n</html>\n"
    )


def _table(view: BookView, now: float) -> str:
    oldest = view.oldest_held
    waited = "" if oldest is None else f" The oldest held task has waited {now - oldest:.0f} s."
    rows = "\n".join(
        f'<tr><th scope="row">{_owner(name)}</th>'
        f"<td>{count.held}</td><td>{count.in_flight}</td></tr>"
        for name, count in sorted(view.owners.items())
    )
    flying = sum(count.in_flight for count in view.owners.values())
    return (
        "<p>Tasks held in the turn book until their owner's turn comes, and tasks taken"
        " from it (in flight: on the broker or running). The live workers have"
        f' <strong id="capacity">{view.capacity}</strong> slot{"" if view.capacity == 1 else "s"}.'
        f"{waited}</p>\n"
        '<table id="owners">\n<thead><tr><th scope="col">Owner</th><th scope="col">Held</th>'
        '<th scope="col">In flight</th></tr></thead>\n'
        f"<tbody>\n{rows}\n</tbody>\n"
        f'<tfoot><tr><th scope="row">All owners</th><td>{view.held}</td><td>{flying}</td></tr>'
        "</tfoot>\n</table>"
    )


def _owner(name: str) -> str:
    return f"<code>{html.escape(name)}</code>" if name else "<em>(no token)</em>"


def add_owners_page(handlers: MutableSequence[Any] | None = None) -> None:
    """Add `/owners` to Flower's handlers, before its catch-all 404 (once)."""
    found: MutableSequence[Any] = flower_app.default_handlers if handlers is None else handlers
    if any(_path_of(handler) == OWNERS_PATH for handler in found):
        return
    found.insert(len(found) - 1, (OWNERS_PATH, OwnersPage))


def _path_of(handler: Any) -> str | None:
    if isinstance(handler, tuple):
        return str(handler[0])
    regex = getattr(handler, "regex", None)
    return None if regex is None else str(regex.pattern).rstrip("$")
