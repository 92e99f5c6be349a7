"""The suite's file order (tests/conftest.py, `LONGEST_FIRST`) names files
that exist: a file renamed or split away would otherwise drop back into the
queue unnoticed and leave a worker running it alone at the end."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST_FIRST


def test_every_file_listed_longest_first_is_a_test_file() -> None:
    here = Path(__file__).parent
    missing = [name for name in LONGEST_FIRST if not (here / name).is_file()]
    assert missing == []
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST), "a file listed twice"
