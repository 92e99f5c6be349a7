"""shared.codec: orjson where it answers as the standard library would."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from shared.codec import copied, decode, encode, encode_bytes, may_hold_long_integer

# What "possibly an integer beyond 64 bits" means: 19 ASCII digits in a row.
LONG_NUMBER = re.compile(rb"[0-9]{19}")


@given(st.binary(max_size=60) | st.text('0123456789 -.e"[],', max_size=60).map(str.encode))
def test_long_integers_are_spotted_as_a_regular_expression_would(raw: bytes) -> None:
    assert may_hold_long_integer(raw) == bool(LONG_NUMBER.search(raw))


@given(st.integers())
def test_integers_of_any_size_come_back_exact(number: int) -> None:
    value = {"n": number, "list": [number, -number]}
    assert decode(encode(value)) == value


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=12,
    )
)
def test_a_copy_is_equal_shares_nothing_and_knows_its_length(value: object) -> None:
    try:
        expected = encode_bytes(value)
    except UnicodeEncodeError:  # a lone surrogate: no copy either
        return
    copy, length = copied(value)
    assert copy == value and length == len(expected)
    if isinstance(value, dict | list) and value:
        assert copy is not value
