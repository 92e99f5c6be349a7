"""Whole histories under faults on the deployments of one host: the file
and SQLite stores, with web, workers, beat and the gRPC process beside them
(tests/test_histories.py says what a history is and checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.history_check import check_history

pytestmark = [pytest.mark.timeout(400)]


# The file store is the SQLite store with each task also a file: its history
# runs every step of the SQLite store's, and the SQLite store's own history
# (a minute of the suite's budget) is opt-in.
@pytest.mark.parametrize("backend", ["file", pytest.param("sqlite", marks=pytest.mark.slow)])
def test_a_history_under_faults_has_no_anomaly(backend: str, tmp_path: Path) -> None:
    check_history(backend, tmp_path)
