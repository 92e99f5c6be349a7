"""One whole history under faults on a deployment, held against every
promise: what each `tests/test_histories*.py` file runs (see
tests/test_histories.py)."""

from __future__ import annotations

import os
import random
from pathlib import Path

from tests.support.history import hooked
from tests.support.history_run import run_history

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


def check_history(backend: str, tmp_path: Path, attempts: int = 1) -> None:
    """One history on `backend` (its turns given `attempts` runs), with every
    fault injected and no anomaly."""
    seed = int(os.environ.get("TOOLNEXUS_HISTORY_SEED") or random.SystemRandom().randrange(10**6))
    outcome = run_history(tmp_path, backend, SECONDS, seed, attempts)
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
