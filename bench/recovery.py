"""How fast the service recovers, the times the reliability tests no longer
assert (a loaded machine is slow, not wrong):

    python3 bench/recovery.py [--runs 2]

Runs the two scenarios of tests/test_reliability_outage.py (Redis stopped
under load, then back) and tests/test_reliability_worker_killed.py (a worker
SIGKILLed among 200 tasks) with pytest, each `--runs` times, and prints the
figures they measure: the slowest error reply while Redis is down, how soon
the front end serves again once it is back, and how long after the kill the
reaper had failed the killed worker's last task (against the stale threshold
plus a beat). A run whose test failed is reported as failed, not measured.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = {
    "tests/test_reliability_outage.py": "redis outage:",
    "tests/test_reliability_worker_killed.py": "worker killed:",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    runs = parser.parse_args().runs
    failed = 0
    for number in range(1, runs + 1):
        for test, prefix in SCENARIOS.items():
            done = subprocess.run(
                [sys.executable, "-m", "pytest", test, "-q", "-s", "-p", "no:cacheprovider"],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            lines = [line for line in done.stdout.splitlines() if line.startswith(prefix)]
            verdict = "passed" if done.returncode == 0 else "FAILED"
            failed += done.returncode != 0
            print(f"run {number} {test} {verdict}: {lines[-1] if lines else '(no figures)'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
