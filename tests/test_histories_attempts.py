"""A whole history under faults on the `redis` deployment with three attempts
a turn (TOOLNEXUS_MAX_ATTEMPTS=3): a killed worker, pool process or paused
worker costs an attempt, not the task (its parts: tests/support/history_run.py;
what a history is and checks: tests/test_histories.py; what attempts add to
the checker: tests/support/history.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.history_check import check_history

pytestmark = [pytest.mark.timeout(400)]


def test_a_history_under_faults_with_attempts_has_no_anomaly_on_redis(tmp_path: Path) -> None:
    check_history("redis", tmp_path, attempts=3)
