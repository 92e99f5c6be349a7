"""The console's turn counts: `GET /console/api/turns`, how many of the
caller's tasks wait in the turn book for their turn (held) and how many are
taken (in flight: on the broker or running); see `shared.owners.turns`.

The caller is named exactly as the API names it (the bearer check of
`web.auth.tokens`, the same token the console sends with each API call), and
a refusal is the API's: 401 with its challenge, 503 when the issuer's keys
or the store cannot answer. A caller is shown its own counts and no other
owner's name or counts; a principal in TOOLNEXUS_ADMIN_TOKENS is shown every
owner's, and the live workers' slots. With turns off (no fair share and no
running cap, or a store that keeps no book) the answer says so and nothing
else: `{"turns": false}`.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any, Final

from shared.codec import encode_bytes
from shared.errors import StoreError
from shared.owners.book import OwnerCount, TurnBook
from web.auth.tokens import Authenticator, administrators
from web.core.errors import RequestError, describe, status_body
from web.http.edge import challenge

# Where the console's blueprint serves it, under `/console`.
TURNS_PATH: Final = "/api/turns"
JSON: Final = "application/json"


class TurnCounts:
    """The turn counts as one caller may see them."""

    def __init__(
        self, authenticator: Authenticator, book: TurnBook | None, admins: Collection[str]
    ) -> None:
        self._authenticator = authenticator
        self._book = book
        self._admins = administrators(authenticator, admins)

    def answer(self, authorization: str | None) -> dict[str, Any]:
        """What the caller with `authorization` is shown; raises the API's
        refusal (`Unauthorized`, `AuthUnavailable`) or a `StoreError`."""
        owner = self._authenticator.principal(authorization)
        if self._book is None:
            return {"turns": False}
        view = self._book.view()
        answer: dict[str, Any] = {
            "turns": True,
            "owner": _counts(view.owners.get(owner, OwnerCount())),
        }
        if owner in self._admins:
            oldest = view.oldest_held
            answer["admin"] = True
            answer["owners"] = {name: _counts(count) for name, count in sorted(view.owners.items())}
            answer["capacity"] = view.capacity
            answer["oldestHeld"] = (
                None
                if oldest is None
                else datetime.fromtimestamp(oldest, UTC).isoformat().replace("+00:00", "Z")
            )
        return answer

    def reply(self, authorization: str | None) -> tuple[bytes, int, list[tuple[str, str]]]:
        """The answer as an HTTP reply (body, status, headers); a refusal in
        the HTTP+JSON error shape, as the API's routes give it."""
        headers = [("Cache-Control", "no-store")]
        try:
            return encode_bytes(self.answer(authorization)), 200, headers
        except (RequestError, StoreError) as error:
            wire = describe(error)
            headers.extend(challenge(wire.rest_status))
            return encode_bytes(status_body(wire)), wire.rest_status, headers


def _counts(count: OwnerCount) -> dict[str, int]:
    return {"held": count.held, "inFlight": count.in_flight}
