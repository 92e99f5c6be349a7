"""Whole histories under faults on the deployments of one host: the file
and SQLite stores, with web, workers, beat and the gRPC process beside them
(tests/test_histories.py says what a history is and checks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_histories import ONE_HOST, check_history

pytestmark = [pytest.mark.timeout(400)]


@pytest.mark.parametrize("backend", ONE_HOST)
def test_a_history_under_faults_has_no_anomaly(backend: str, tmp_path: Path) -> None:
    check_history(backend, tmp_path)
