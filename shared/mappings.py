"""`is_mapping`: `isinstance(value, Mapping)` at the cost of a dict lookup.

The hot path (every JSON-RPC request and every translated task) asks this
of decoded JSON a dozen times per request. Against `Mapping`, an abstract
class, `isinstance` goes through `ABCMeta.__instancecheck__` each time,
several times the cost of the question; the answer only depends on the
value's type, so it is asked once per type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, TypeGuard

_ANSWERS: Final[dict[type, bool]] = {dict: True}


def is_mapping(value: object) -> TypeGuard[Mapping[str, Any]]:
    kind = type(value)
    answer = _ANSWERS.get(kind)
    if answer is None:
        answer = _ANSWERS[kind] = isinstance(value, Mapping)
    return answer
