"""shared.codec: orjson where it answers as the standard library would."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from shared.codec import decode, encode, may_hold_long_integer

# What "possibly an integer beyond 64 bits" means: 19 ASCII digits in a row.
LONG_NUMBER = re.compile(rb"[0-9]{19}")


@given(st.binary(max_size=60) | st.text('0123456789 -.e"[],', max_size=60).map(str.encode))
def test_long_integers_are_spotted_as_a_regular_expression_would(raw: bytes) -> None:
    assert may_hold_long_integer(raw) == bool(LONG_NUMBER.search(raw))


@given(st.integers())
def test_integers_of_any_size_come_back_exact(number: int) -> None:
    value = {"n": number, "list": [number, -number]}
    assert decode(encode(value)) == value
