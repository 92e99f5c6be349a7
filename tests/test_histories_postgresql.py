"""A whole history under faults on the `postgresql` deployment (its parts:
tests/support/history_run.py; what a history is and checks:
tests/test_histories.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.history_check import check_history

pytestmark = [pytest.mark.timeout(400)]


def test_a_history_under_faults_has_no_anomaly_on_postgresql(tmp_path: Path) -> None:
    check_history("postgresql", tmp_path)
