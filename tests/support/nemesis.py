"""A seeded schedule of faults, each injected, left a while, then healed.

Every fault of the list comes once first (in an order the seed shuffles,
however long that takes), then faults drawn at random until the time is up; between two faults the
fleet gets a quiet spell. Each fault is an op of the history (kind
"fault"), and `schedule` lists them as they ran, so a failing history can
be run again with its seed.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tests.support.history import History

Heal = Callable[[], None]


@dataclass(frozen=True)
class Fault:
    name: str
    inject: Callable[[], Heal]  # returns what heals it
    lasts: tuple[float, float] = (1.0, 3.0)  # seconds it lasts, drawn between


@dataclass
class Nemesis:
    faults: Sequence[Fault]
    history: History
    seed: int
    quiet: tuple[float, float] = (0.5, 1.5)
    schedule: list[tuple[float, str, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self, seconds: float) -> None:
        """Inject every fault once, then more until `seconds` have passed
        (the fault under way when the time is up lasts to its end, then
        healed)."""
        rng = random.Random(self.seed)
        began = time.monotonic()
        first = list(self.faults)
        rng.shuffle(first)
        while (first or time.monotonic() - began < seconds) and not self.stop.is_set():
            fault = first.pop(0) if first else rng.choice(list(self.faults))
            lasted = rng.uniform(*fault.lasts)
            start = time.monotonic()
            heal = fault.inject()
            try:
                self.stop.wait(lasted)
            finally:
                heal()
            self.history.record("nemesis", "fault", start, True, fault=fault.name, lasted=lasted)
            self.schedule.append((start - began, fault.name, lasted))
            self.stop.wait(rng.uniform(*self.quiet))

    def describe(self) -> str:
        return f"seed {self.seed}: " + ", ".join(
            f"{at:.1f}s {name} ({lasted:.1f}s)" for at, name, lasted in self.schedule
        )
