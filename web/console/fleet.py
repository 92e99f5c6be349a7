"""The console's fleet dashboard: the page `/console/fleet` and its data,
`GET /console/fleet.json?since=<seconds since the epoch>`.

The page (`templates/console/fleet.html`, `static/fleet.js`) asks once for
the whole window this front end keeps (`web.console.fleet_window`), then
every few seconds for the points after the last one it has, and draws
them with uPlot (`static/uPlot.iife.min.js`, bundled at a pinned version
from `web/console/vendor/`). A point is one sample with what changed since
the one before it:

- `rates`: runs per second by A2A outcome; `p50`, `p99`: the send-to-outcome
  latency of those runs (seconds; null when none ended);
- `queueDepth`, `oldestAge`: the fulfilment queue's backlog, counting the
  tasks the turn book holds, as `/metrics` counts them;
- `held`, `inFlight`: tasks per owner in the turn book (null with turns off);
- `workers`, `slots`: the live workers and their slots together.

The caller is named as the API names it (a refusal is the API's, as for the
turn counts). Every caller sees the fleet's totals, as `/metrics` shows
them; per owner, a caller sees only its own counts, and a principal in
TOOLNEXUS_ADMIN_TOKENS sees every owner's and each worker by name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final

from flask import Blueprint, render_template, request
from werkzeug.wrappers import Response

from shared.broker.backlog import BacklogSource
from shared.codec import encode_bytes
from shared.errors import StoreError
from shared.owners.book import OwnerCount, TurnBook
from shared.settings import Settings
from shared.store.contract import Store
from shared.store.wiring import abilities_of
from web.auth.tokens import Authenticator
from web.console.fleet_window import FleetSource, FleetWindow, Sample, percentile, rates
from web.core.errors import RequestError, describe, status_body
from web.http.edge import challenge

# Where the console's blueprint serves them, under `/console`.
FLEET_PATH: Final = "/fleet"
FLEET_JSON_PATH: Final = "/fleet.json"


class FleetData:
    """The window as one caller may see it."""

    def __init__(
        self, authenticator: Authenticator, window: FleetWindow, admins: Collection[str]
    ) -> None:
        self._authenticator = authenticator
        self._window = window
        # Only a named principal can be an administrator (as for the turn counts).
        self._admins = frozenset(admins) if authenticator.required else frozenset()

    def answer(self, authorization: str | None, since: str | None) -> dict[str, Any]:
        """What the caller with `authorization` is shown of the points after
        `since`; raises the API's refusal or a `StoreError`."""
        owner = self._authenticator.principal(authorization)
        admin = owner in self._admins
        pairs = self._window.since(_seconds(since))
        answer: dict[str, Any] = {
            "interval": self._window.interval,
            "window": self._window.window,
            "admin": admin,
            "points": [_point(before, after, owner, admin) for before, after in pairs],
        }
        if admin and pairs:
            workers = pairs[-1][1].workers
            answer["workerSlots"] = dict(sorted(workers.items())) if workers is not None else None
        return answer

    def reply(
        self, authorization: str | None, since: str | None
    ) -> tuple[bytes, int, list[tuple[str, str]]]:
        """The answer as an HTTP reply; a refusal in the HTTP+JSON error shape."""
        headers = [("Cache-Control", "no-store")]
        try:
            return encode_bytes(self.answer(authorization, since)), 200, headers
        except (RequestError, StoreError) as error:
            wire = describe(error)
            headers.extend(challenge(wire.rest_status))
            return encode_bytes(status_body(wire)), wire.rest_status, headers


def _point(before: Sample | None, after: Sample, owner: str, admin: bool) -> dict[str, Any]:
    held = in_flight = None
    if after.owners is not None:
        owners = after.owners if admin else {owner: after.owners.get(owner, OwnerCount())}
        held = {name: count.held for name, count in sorted(owners.items())}
        in_flight = {name: count.in_flight for name, count in sorted(owners.items())}
    return {
        "t": round(after.time, 3),
        "rates": _rounded(rates(before, after)),
        "p50": _round(percentile(before, after, 0.5)),
        "p99": _round(percentile(before, after, 0.99)),
        "queueDepth": after.depth,
        "oldestAge": _round(after.oldest_age),
        "held": held,
        "inFlight": in_flight,
        "workers": None if after.workers is None else len(after.workers),
        "slots": None if after.workers is None else sum(after.workers.values()),
    }


def _seconds(value: str | None) -> float:
    try:
        seconds = float(value) if value else 0.0
    except ValueError:
        return 0.0
    return seconds if math.isfinite(seconds) else 0.0


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _rounded(values: Mapping[str, float] | None) -> dict[str, float] | None:
    return None if values is None else {k: round(v, 4) for k, v in values.items()}


def install_fleet(
    console: Blueprint,
    settings: Settings,
    store: Store,
    authenticator: Authenticator,
    book: TurnBook | None,
    backlog: BacklogSource | None,
    page: Callable[[], Mapping[str, Any]],
) -> None:
    """The page and its data on the console's blueprint; `page()` is what
    every console page's template is given."""
    source = FleetSource(backlog, book, abilities_of(store).documents, settings.queue)
    window = FleetWindow(source, interval=settings.fleet_sample_every)
    data = FleetData(authenticator, window, settings.admin_tokens)

    @console.get(FLEET_PATH)
    def fleet() -> str:
        return render_template("console/fleet.html", **page())

    @console.get(FLEET_JSON_PATH)
    def fleet_json() -> Response:
        authorization = request.headers.get("Authorization")
        body, status, headers = data.reply(authorization, request.args.get("since"))
        return Response(body, status=status, headers=headers, mimetype="application/json")
