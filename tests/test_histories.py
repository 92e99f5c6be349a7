"""Whole histories checked under injected faults, on every store and broker.

Recording clients (senders on JSON-RPC, HTTP+JSON and gRPC retrying with
the same messageId, some with webhooks; pollers, a canceller, streams that
resume, ListTasks walks) work against a real fleet while a seeded nemesis
injects link faults (latency, cuts, a black hole, one way) and process
faults (a worker, a pool child, beat, the front end and the gRPC process
SIGKILLed, a worker SIGSTOPped past the stale threshold, the front end, the
gRPC process and beat SIGSTOPped, the store and the broker SIGKILLed and
started again on their data); the
checker (`tests/support/history.py`) then holds the whole history against
the service's promises. The seed and the schedule are printed:
`TOOLNEXUS_HISTORY_SEED=<seed>` runs the same schedule again, and
`bench/histories.py` runs long ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.history_check import check_history

pytestmark = [pytest.mark.timeout(400)]


# Each deployment's history is a file of its own (test_histories_*.py): the
# suite's workers run them side by side, as they do any two files.
def test_a_history_under_faults_has_no_anomaly_on_redis(tmp_path: Path) -> None:
    check_history("redis", tmp_path)
