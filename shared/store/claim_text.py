"""The worker's claim as text a store's own script completes.

A store that claims in one server-side step (Redis's script) fills in what
only the stored task knows: its contextId and the generation the claim
leaves it at. The event goes as three pieces of JSON
text, split where those two values go.
"""

from __future__ import annotations

from typing import Final

from shared.codec import encode
from shared.events import StatusUpdate
from shared.generation import FIELD as GENERATION

_CONTEXT: Final = "\u0000context\u0000"
_GENERATION: Final = "\u0000generation\u0000"
_CONTEXT_JSON: Final = encode(_CONTEXT)
_GENERATION_JSON: Final = encode(_GENERATION)


def claim_text(event: StatusUpdate) -> tuple[str, str, str]:
    """The event's text before its contextId, between it and its generation
    (a bare JSON number there), and after."""
    text = encode({**event, "contextId": _CONTEXT, GENERATION: _GENERATION})
    before, context, rest = text.partition(_CONTEXT_JSON)
    between, generation, after = rest.partition(_GENERATION_JSON)
    assert context and generation, "the event's text holds its contextId, then its generation"
    return before, between, after
