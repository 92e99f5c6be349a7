"""Signed agent cards (A2A 1.0 §8.4): a JWS over the card, in `signatures`.

What is signed is the card as a 1.0 client reads it: a client verifies the
card after parsing it into the protocol's AgentCard (so fields it does not
know, and the 0.3 fields a card for old clients also carries, are not part
of what it checks), canonicalized with JCS, the payload detached. The card
is put through the official a2a-sdk's own parsing and signer, so the bytes
signed are those its verifier rebuilds. The card of either dialect has the
same 1.0 reading, so one signature serves both; 0.3 clients, which read the
card in 0.3's own model, are not served a signature of their own.

The protected header holds `alg`, `kid` (the key's thumbprint, the `kid` of
its entry in /.well-known/jwks.json) and `typ` "JOSE". Cards are built per
request (their URL may come from the Host) and an ES256 signature differs
each time it is made, so signatures are kept by what they sign: the same
card gets the same signature, and its ETag holds still.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final, cast

from shared.settings import Settings
from shared.signing_keys import SigningKey, load_signing_key

# Signatures kept, by card: one per Host a card is served for, and per dialect.
_KEPT: Final = 64


class CardSigner:
    def __init__(self, key: SigningKey) -> None:
        # The SDK's client side loads here, in a process that signs cards only.
        from a2a.utils.signing import ProtectedHeader, create_agent_card_signer

        self.key = key
        # No `jku`: given as None the SDK's signer would write `"jku": null`.
        header = cast(ProtectedHeader, {"alg": key.algorithm, "kid": key.kid, "typ": "JOSE"})
        self._sign = create_agent_card_signer(key.private, header)
        self._signatures: OrderedDict[bytes, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def signed(self, card: Mapping[str, Any]) -> dict[str, Any]:
        """`card` with its signature (any it had is replaced)."""
        unsigned = {name: value for name, value in card.items() if name != "signatures"}
        reading = hashlib.sha256(json.dumps(unsigned, sort_keys=True).encode()).digest()
        with self._lock:
            signature = self._signatures.get(reading)
            if signature is not None:
                self._signatures.move_to_end(reading)
        if signature is None:
            signature = self._signature(unsigned)
            with self._lock:
                self._signatures[reading] = signature
                while len(self._signatures) > _KEPT:
                    self._signatures.popitem(last=False)
        return {**unsigned, "signatures": [signature]}

    def _signature(self, unsigned: dict[str, Any]) -> dict[str, Any]:
        from a2a.client.card_resolver import parse_agent_card
        from google.protobuf.json_format import MessageToDict

        parsed = self._sign(parse_agent_card(copy.deepcopy(unsigned)))
        made: dict[str, Any] = MessageToDict(parsed.signatures[-1])
        return made


def card_signer(settings: Settings) -> CardSigner | None:
    if not settings.card_signing_key:
        return None
    return CardSigner(load_signing_key(settings.card_signing_key, "TOOLNEXUS_CARD_SIGNING_KEY"))
