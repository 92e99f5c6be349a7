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

import os
import random
from pathlib import Path

import pytest

from tests.support.history import hooked
from tests.support.history_run import BACKENDS, run_history

pytestmark = [pytest.mark.timeout(400)]

# The servers each deployment SIGKILLs and starts again on their data (the
# file and SQLite stores are files: their broker, Redis, is killed instead).
KILLED = {
    "redis": ["store SIGKILL"],
    "postgresql": ["store SIGKILL"],
    "file": ["broker SIGKILL"],
    "sqlite": ["broker SIGKILL"],
    "amqp": ["store SIGKILL", "broker SIGKILL"],
}
# The store's outage: its link refused (Redis, PostgreSQL), its database's
# write lock held (the file and SQLite stores); the amqp deployment's store
# is not on the faulted link.
OUTAGE = {
    "redis": ["store outage"],
    "postgresql": ["store outage"],
    "file": ["store outage"],
    "sqlite": ["store outage"],
    "amqp": [],
}
SECONDS = 0.0  # every fault once (the nemesis runs each once first): about 30 s of faults


# The deployments on one host (the file and SQLite stores) run from
# tests/test_histories_on_one_host.py: a file of their own, so the suite's
# workers run the two halves at once.
ONE_HOST = ("file", "sqlite")


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b not in ONE_HOST])
def test_a_history_under_faults_has_no_anomaly(backend: str, tmp_path: Path) -> None:
    check_history(backend, tmp_path)


def check_history(backend: str, tmp_path: Path) -> None:
    """One history on `backend`, with every fault injected and no anomaly."""
    seed = int(os.environ.get("TOOLNEXUS_HISTORY_SEED") or random.SystemRandom().randrange(10**6))
    outcome = run_history(tmp_path, backend, SECONDS, seed)
    print(f"\n{outcome.line}\n{outcome.schedule}")
    assert outcome.history.acknowledged(), "no task was acknowledged"
    assert {op.value["fault"] for op in outcome.history.of("fault")} >= {
        "latency", "cut", "black hole", "one way", "worker SIGKILL", "pool child SIGKILL",
        "worker SIGSTOP past stale", "front end SIGKILL", "beat SIGKILL", "gRPC SIGKILL",
        "front end SIGSTOP", "gRPC SIGSTOP", "beat SIGSTOP", "partition", *KILLED[backend],
        *OUTAGE[backend],
    }  # fmt: skip
    assert outcome.history.of("list") and outcome.history.of("stream")
    assert hooked(outcome.history), "no send asked for a webhook"
    assert outcome.history.replies(), "no task asked back and was answered"
    shown = {kind: items[:5] for kind, items in outcome.anomalies.items()}
    assert outcome.anomalies == {}, f"{shown}; {outcome.schedule}"
