"""The task console: pages at `/console` for people, served when
TOOLNEXUS_CONSOLE is on (the embedded server's default).

The pages are server-rendered shells (`web/console/templates`) and
one plain script (`web/console/static/console.js`) that calls the
A2A JSON-RPC API at `POST /` exactly as any browser client would: ListTasks,
GetTask, SubscribeToTask, SendStreamingMessage, CancelTask, with the token
the user pasted (kept in the tab's sessionStorage) as `Authorization`. The
server renders no task data, so the console shows only what the API shows
its caller: the API's owner scoping is the console's. Its one call of its
own, the caller's turn counts (`web.console.turns`), checks the same token
the same way.

Every console response carries a Content-Security-Policy that allows only
this origin's own script and style (no inline script, no `eval`, nothing
fetched from elsewhere, Trusted Types required so no string ever becomes
HTML), and is never framed. Nothing is fetched at run time: it works offline.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from flask import Blueprint, Flask, Request, render_template, request
from werkzeug.wrappers import Response

from shared.broker.backlog import BacklogSource
from shared.owners.book import TurnBook
from shared.settings import Settings
from shared.store.contract import Store
from shared.task import TaskState
from web.auth.tokens import Authenticator
from web.console.fleet import install_fleet
from web.console.triage import Triage, install_triage
from web.console.turns import JSON, TURNS_PATH, TurnCounts

PREFIX: Final = "/console"
CONTENT_SECURITY_POLICY: Final = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "require-trusted-types-for 'script'",
        "trusted-types 'none'",
    )
)
_PAGE_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}
STATE_NAMES: Final = tuple(state.value for state in TaskState)


def install_console(
    app: Flask,
    settings: Settings,
    store: Store,
    authenticator: Authenticator,
    book: TurnBook | None = None,
    backlog: BacklogSource | None = None,
) -> None:
    """Serve the console on `app` (call only when the console is on); `book`
    is the turn book the front end takes turns on (None: turns are off),
    `backlog` where the fleet page reads the queue's backlog (None: unknown)."""
    console = Blueprint(
        "console",
        __name__,
        url_prefix=PREFIX,
        static_folder="static",
        template_folder="templates",
    )
    shared: dict[str, Any] = {
        "agent_name": settings.name,
        "auth_required": authenticator.required,
        "states": STATE_NAMES,
        "lists_by_scan": lists_by_scan(store),
    }

    @console.get("/")
    def tasks() -> str:
        return render_template(
            "console/tasks.html",
            **shared,
            **_page(request),
            state=_chosen_state(request.args.get("state")),
            context=request.args.get("context", "")[:1024],
        )

    @console.get("/tasks/<path:task_id>")
    def task(task_id: str) -> str:
        return render_template("console/task.html", **shared, **_page(request), task_id=task_id)

    @console.get("/failed")
    def failed_page() -> str:
        return render_template("console/failed.html", **shared, **_page(request))

    triage = Triage(app.extensions["toolnexus"], authenticator, settings.admin_tokens)
    install_triage(console, triage)
    counts = TurnCounts(authenticator, book, settings.admin_tokens)

    @console.get(TURNS_PATH)
    def turns() -> Response:
        body, status, headers = counts.reply(request.headers.get("Authorization"))
        return Response(body, status=status, headers=headers, mimetype=JSON)

    page = lambda: {**shared, **_page(request)}  # noqa: E731
    install_fleet(console, settings, store, authenticator, book, backlog, page)

    console.after_request(with_page_headers)
    app.register_blueprint(console)  # `/console` redirects to `/console/`


def index_page(settings: Settings, card_path: str) -> Response:
    """`GET /` as a browser asks for it: where the console and the card are."""
    html = render_template(
        "console/index.html",
        agent_name=settings.name,
        card_path=f"{request.script_root}{card_path}",
        **_page(request),
    )
    return with_page_headers(Response(html, mimetype="text/html"))


def wants_html(asking: Request) -> bool:
    """A browser navigating here (Accept names text/html above JSON)."""
    offered = ("application/json", "text/html")
    return asking.accept_mimetypes.best_match(offered) == "text/html"


def with_page_headers(response: Response) -> Response:
    for name, value in _PAGE_HEADERS.items():
        response.headers[name] = value
    return response


def lists_by_scan(store: Store) -> bool:
    """Whether ListTasks reads every task (`shared.store.listing.list_by_scan`):
    no shipped store does; a store without an index of its own may."""
    return store.lists_by_scan


def _page(asking: Request) -> Mapping[str, str]:
    """Where the page's links and calls go, behind any path prefix."""
    root = asking.script_root
    return {"api_url": f"{root}/", "console_url": f"{root}{PREFIX}/"}


def _chosen_state(value: str | None) -> str:
    return value if value in STATE_NAMES else ""
