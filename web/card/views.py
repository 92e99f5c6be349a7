"""The agent cards as one request sees them: the public card at the
well-known paths, and the extended card of GetExtendedAgentCard.

Both are built per request, because the card's URL may come from the
request's Host (see `web.http.browsers`). The extended card is the public one
with TOOLNEXUS_EXTENDED_CARD's fields laid over it; it is served to any
caller past the bearer check, so when no tokens are configured it is as
public as the card itself (the public card then declares no scheme to
authenticate with). The public card lists the bindings
TOOLNEXUS_CARD_BINDINGS names; the extended card, every binding served.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.dialects import V03
from shared.settings import CARD_BINDINGS, Settings
from web.card.build import build_card, with_v03_fields
from web.card.signing import CardSigner
from web.card.skills import Skill
from web.http.browsers import BrowserPolicy
from web.http.wsgi import HttpRequest


@dataclass(frozen=True)
class CardViews:
    settings: Settings
    skills: Sequence[Skill]
    browsers: BrowserPolicy
    security: Mapping[str, Any]
    streaming: bool
    push: bool
    overrides: Mapping[str, Any]
    extended_fields: Mapping[str, Any] | None
    signer: CardSigner | None = None  # TOOLNEXUS_CARD_SIGNING_KEY: every card signed

    def public(self, request: HttpRequest, version: str) -> tuple[dict[str, Any], bool]:
        """The card for `request` in `version`, and whether its URL came from
        the request's Host (then caches must vary on Host)."""
        url, from_host = self.browsers.base_url(request)
        document = self._card(url, self.overrides, self.settings.card_bindings)
        if version == V03:
            document = with_v03_fields(document, self.security)
        return self._signed(document), from_host

    def extended(self, request: HttpRequest, version: str) -> dict[str, Any]:
        """The extended card in `version` (0.3's authenticated extended card
        carries the 0.3 fields); only called when `extended_fields` is set."""
        url, _ = self.browsers.base_url(request)
        return self.extended_at(url, version)

    def extended_at(self, url: str, version: str) -> dict[str, Any]:
        """The extended card with its JSON-RPC endpoint at `url` (the gRPC
        binding has no HTTP request to take it from)."""
        assert self.extended_fields is not None
        document = self._card(url, {**self.overrides, **self.extended_fields})
        if version == V03:
            document = with_v03_fields(document, self.security)
        return self._signed(document)

    def _signed(self, document: dict[str, Any]) -> dict[str, Any]:
        return self.signer.signed(document) if self.signer is not None else document

    def _card(
        self, url: str, overrides: Mapping[str, Any], bindings: Collection[str] = CARD_BINDINGS
    ) -> dict[str, Any]:
        return build_card(
            self.settings,
            self.skills,
            url,
            streaming=self.streaming,
            push=self.push,
            security=self.security,
            overrides=overrides,
            extended=self.extended_fields is not None,
            bindings=bindings,
        )
