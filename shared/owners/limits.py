"""Each owner's limits: the `TOOLNEXUS_OWNER_*` defaults, with the per-owner
values of `TOOLNEXUS_OWNER_LIMITS` laid over them.

A limit of `None` is off. The anonymous caller of a deployment without
tokens is the owner `""`, limited like any other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shared.settings import Settings


@dataclass(frozen=True)
class OwnerLimits:
    rate: float | None = None  # sends a second, refilled continuously
    burst: int | None = None  # sends at once from a full bucket
    max_active: int | None = None  # tasks not yet finished
    max_running: int | None = None  # tasks published to workers or running
    weight: float = 1.0  # share of the workers when owners wait together

    @property
    def bucket(self) -> int:
        """The bucket's size: the burst, or a second's worth of sends."""
        if self.burst is not None:
            return self.burst
        return max(1, math.ceil(self.rate or 1))


class LimitTable:
    """Every owner's limits, read once from settings."""

    def __init__(self, settings: Settings) -> None:
        self.default = OwnerLimits(
            rate=settings.owner_rate,
            burst=settings.owner_burst,
            max_active=settings.owner_max_active,
            max_running=settings.owner_max_running,
        )
        self._overrides = {
            owner: _laid_over(self.default, dict(values)) for owner, values in settings.owner_limits
        }

    def of(self, owner: str) -> OwnerLimits:
        return self._overrides.get(owner, self.default)

    @property
    def limits_sends(self) -> bool:
        """Whether any owner's sends are limited (rate or unfinished tasks)."""
        return any(
            limits.rate is not None or limits.max_active is not None
            for limits in (self.default, *self._overrides.values())
        )

    @property
    def caps_running(self) -> bool:
        return any(
            limits.max_running is not None for limits in (self.default, *self._overrides.values())
        )


def _laid_over(default: OwnerLimits, values: dict[str, float]) -> OwnerLimits:
    """An owner's values over the defaults; 0 turns a limit off for that owner."""

    def whole(key: str, current: int | None) -> int | None:
        if key not in values:
            return current
        return int(values[key]) or None

    rate = values.get("rate", default.rate)
    return OwnerLimits(
        rate=rate or None,
        burst=whole("burst", default.burst),
        max_active=whole("max_active", default.max_active),
        max_running=whole("max_running", default.max_running),
        weight=values.get("weight", default.weight),
    )
