"""The deployment matrix: which broker and which store a deployment test runs on.

A test (or a module, with `pytestmark`) marked `@pytest.mark.matrix` and
taking the `backends` fixture (tests/conftest.py) runs once per selected
combination of broker and store, each a `tests.support.compose.Backends`
for `local_stack(..., backends=backends)`:

- by default: on compose's Redis for both, plus, for tests marked
  `matrix(ci=True)`, the CI subset below;
- `TOOLNEXUS_TEST_MATRIX=full`: on every combination.

A kind maps to the fixture that gives its URL (None: the stack's own
Redis); a new store or broker is one line here and its fixture.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Final

ENV: Final = "TOOLNEXUS_TEST_MATRIX"

# kind -> the session fixture (tests/conftest.py) that gives its URL
BROKER_FIXTURES: Final[dict[str, str | None]] = {
    "redis": None,
    "amqp": "amqp_broker_url",
}
STORE_FIXTURES: Final[dict[str, str | None]] = {
    "redis": None,
    "postgresql": "postgres_store_url",
}


@dataclass(frozen=True)
class Combination:
    broker: str
    store: str

    def __str__(self) -> str:
        return f"{self.broker}-broker-{self.store}-store"


DEFAULT: Final = Combination("redis", "redis")
# What CI runs besides the default, for tests marked matrix(ci=True): each
# broker and each store at least once beyond Redis, the two new ones
# together (a deployment off Redis altogether). The rest, (amqp, redis)
# and (redis, postgresql), run with TOOLNEXUS_TEST_MATRIX=full.
CI_SUBSET: Final = (Combination("amqp", "postgresql"),)


def everything() -> list[Combination]:
    return [Combination(b, s) for b, s in itertools.product(BROKER_FIXTURES, STORE_FIXTURES)]


def selected(*, ci: bool, env: dict[str, str] | None = None) -> list[Combination]:
    mode = (os.environ if env is None else env).get(ENV, "").strip().lower()
    if mode == "full":
        return everything()
    if mode not in ("", "default"):
        raise ValueError(f"{ENV}={mode!r}: use full, or leave it unset")
    return [DEFAULT, *(CI_SUBSET if ci else ())]
