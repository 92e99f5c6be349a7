"""Hypothesis strategies shared by the property tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)


def json_values(max_leaves: int = 10, key_size: int = 8) -> st.SearchStrategy[Any]:
    """Any JSON value: scalars, lists and objects nested a few levels."""
    return st.recursive(
        SCALARS,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(max_size=key_size), inner, max_size=4)
        ),
        max_leaves=max_leaves,
    )
