"""The turn book's repairs, made on first use (see shared.ops.metrics): what
beat's sweep found wrong in the book and put right."""

from __future__ import annotations

from functools import cache
from typing import Literal

from prometheus_client import Counter

# flight: a task counted in flight that no longer is (ended, or gone);
# slots: a worker's slots whose registration lapsed (the worker not seen for
# the stale threshold).
Repair = Literal["flight", "slots"]


@cache
def _repairs() -> Counter:
    return Counter(
        "toolnexus_turn_repairs",
        "Entries of the turn book that beat's sweep dropped: tasks counted in flight"
        " that were not (repair=flight), slots of workers not seen for the stale"
        " threshold (repair=slots)",
        ["repair"],
    )


def count_repairs(repair: Repair, count: int) -> None:
    if count:
        _repairs().labels(repair).inc(count)
