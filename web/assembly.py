"""The front end's parts, built in one place for every process that serves it.

`assemble` builds what each binding stands on: the methods (`Tasks`, on the
store and the dispatcher), the bearer check, the browser policy, and the
agent cards with their skills and the extended card. The Flask app
(`web.app.create_app`: JSON-RPC and HTTP+JSON on WSGI), the gRPC process
(`web.grpc_process`) and the embedded server's gRPC port (on the app's own
assembly) each serve theirs. Nothing here imports Flask or grpcio: the gRPC
process loads no Flask, and a server without gRPC loads no grpcio.

`front` is the WSGI app of the HTTP process: it routes each request to
JSON-RPC, HTTP+JSON or Flask.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

from shared.agent_facts import facts_for
from shared.broker.dispatcher import Dispatcher
from shared.owners.admission import admission
from shared.settings import Settings
from shared.store.wiring import abilities_of, load_hook, open_store
from web.auth.tokens import Authenticator, authenticator_for
from web.card.from_agent import card_from_agent
from web.card.signing import card_signer
from web.card.views import CardViews
from web.core.call import ExtendedCard
from web.core.tasks import Tasks
from web.http.browsers import BrowserPolicy, browser_policy
from web.http.metrics import count_queued
from web.http.wsgi import HttpRequest, WSGIApp
from web.rest.routes import is_rest_path

if TYPE_CHECKING:
    from shared.broker.dispatch import CeleryDispatcher


@dataclass(frozen=True)
class Assembly:
    """What every binding of a process serves on."""

    settings: Settings
    tasks: Tasks
    authenticator: Authenticator
    browsers: BrowserPolicy
    card_overrides: Mapping[str, Any]  # top-level agent-card fields

    @cached_property
    def cards(self) -> CardViews:
        """The agent cards, built (their skills loaded) when first asked for:
        the HTTP process asks at once, the gRPC process only for an extended card."""
        settings = self.settings
        agent = card_from_agent(settings, facts_for(settings.run))
        return CardViews(
            settings,
            agent.skills,
            self.browsers,
            self.authenticator.card_schemes(),
            streaming=True,  # every store can be followed (the adapter polls)
            push=self.tasks.push is not None,
            overrides={**agent.fields, **self.card_overrides},
            extended_fields=settings.extended_card,
            signer=card_signer(settings),
        )

    @property
    def extended_card(self) -> Callable[[HttpRequest, str], Mapping[str, Any]] | None:
        """The extended card as an HTTP request shows it (its URL from the
        request), in a wire version; None when TOOLNEXUS_EXTENDED_CARD is unset."""
        return self.cards.extended if self.settings.extended_card is not None else None

    @property
    def extended_card_at_url(self) -> ExtendedCard | None:
        """The extended card for a binding without an HTTP request (gRPC): its
        JSON-RPC URL is TOOLNEXUS_URL's, or where the HTTP server listens."""
        if self.settings.extended_card is None:
            return None
        url = self.settings.url or f"http://{self.settings.host}:{self.settings.port}/"
        return partial(self.cards.extended_at, url)


def celery_dispatcher(settings: Settings) -> CeleryDispatcher:
    """The Celery dispatcher on TOOLNEXUS_BROKER_URL. Celery and kombu load
    here, in a process that queues through them, and not in the embedded
    server, whose work runs in-process."""
    from shared.broker.dispatch import CeleryDispatcher

    return CeleryDispatcher(settings, on_queued=count_queued)


def assemble(
    settings: Settings,
    store: Any = None,
    dispatcher: Dispatcher | None = None,
    *,
    card: Mapping[str, Any] | None = None,
    strict_hosts: bool = False,
) -> Assembly:
    """`store` defaults to the one TOOLNEXUS_STORE names (a store object or a
    spec string is accepted); `dispatcher` to Celery on TOOLNEXUS_BROKER_URL;
    `card` overrides top-level agent-card fields, after those of
    TOOLNEXUS_CARD; `strict_hosts` refuses Host names that are not loopback
    or configured even without TOOLNEXUS_ALLOWED_HOSTS (see `web.http.browsers`)."""
    task_store = open_store(settings, store)
    dispatcher = dispatcher if dispatcher is not None else celery_dispatcher(settings)
    authenticator = authenticator_for(settings)
    browsers = browser_policy(settings, strict_hosts=strict_hosts)
    # The owners' send limits on the store's limiter, made once; None (nothing
    # on a send's way) when none is set. A user's store may keep no limiter
    # (two methods, or a whole contract that predates it): a limit then
    # stops start-up, naming it.
    limits = admission(settings, abilities_of(task_store).send_limiter)
    tasks = Tasks(settings, task_store, dispatcher, load_hook(settings), admission=limits)
    overrides = {**(settings.card or {}), **(card or {})}
    return Assembly(settings, tasks, authenticator, browsers, overrides)


def front(flask_app: WSGIApp, endpoint: WSGIApp, rest: WSGIApp | None = None) -> WSGIApp:
    """The WSGI app: `POST /` to the JSON-RPC endpoint, the HTTP+JSON routes
    to `rest`, everything else to Flask."""

    def dispatch(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/" and environ.get("REQUEST_METHOD") == "POST":
            return endpoint(environ, start_response)
        if rest is not None and is_rest_path(path):
            return rest(environ, start_response)
        return flask_app(environ, start_response)

    return dispatch
