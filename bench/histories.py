"""Long runs of checked histories under faults (not a timed test):

    python3 bench/histories.py --minutes 30 [--backends redis,postgresql,file,amqp]
                               [--each 120] [--seed N] [--attempts 3]

Runs histories of `--each` seconds of faults (tests/support/history_run.py:
a fleet, recording clients, a seeded nemesis, the checker) one after
another, cycling over the backends, until `--minutes` of faults have run;
each history draws its seed from `--seed` (or the clock); `--attempts`
gives each turn of a task that many runs (TOOLNEXUS_MAX_ATTEMPTS). Prints one row
per history (backend, seed, operations, faults, anomalies by kind) and the
totals, and exits 1 if any history had an anomaly; each history's
operations are kept under the printed folder (history.jsonl), with the
fleet's logs.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.history_run import BACKENDS, run_history


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--each", type=float, default=120.0, help="seconds of faults a history")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument(
        "--attempts", type=int, default=1, help="TOOLNEXUS_MAX_ATTEMPTS of every fleet"
    )
    options = parser.parse_args()
    backends = [name.strip() for name in options.backends.split(",") if name.strip()]
    rng = random.Random(options.seed)
    folder = Path(tempfile.mkdtemp(prefix="toolnexus-histories-"))
    print(f"histories under {folder}, seed {options.seed}", flush=True)
    totals: Counter[str] = Counter()
    ran = 0.0
    rows = 0
    while ran < options.minutes * 60:
        backend = backends[rows % len(backends)]
        seed = rng.randrange(10**6)
        here = folder / f"{rows:03d}-{backend}"
        here.mkdir()
        began = time.monotonic()
        outcome = run_history(here, backend, options.each, seed, options.attempts)
        ran += options.each
        rows += 1
        operations = len(outcome.history.ops)
        faults = len(outcome.history.of("fault"))
        found = {kind: len(items) for kind, items in outcome.anomalies.items()}
        totals.update(found)
        print(
            f"{rows:3d}  {backend:10s}  seed {seed:6d}  {time.monotonic() - began:6.0f} s"
            f"  operations {operations:6d}  faults {faults:3d}  anomalies {found or 0}",
            flush=True,
        )
        if outcome.anomalies:
            print(f"     {outcome.schedule}")
            for kind, items in outcome.anomalies.items():
                print(f"     {kind}: {items[:3]}")
    print(
        f"{rows} histories, {ran / 60:.1f} minutes of faults, anomalies {dict(totals) or 0}",
        flush=True,
    )
    return 1 if totals else 0


if __name__ == "__main__":
    sys.exit(main())
