"""The differences between the SQL databases the stores run on, in one place.

The shared SQL (`shared.stores.sql.documents`, `.indexes`) is written once,
with `:name` parameters and a few fragments in braces, and compiled for each
database once per statement:

- `{now}`: the time now, seconds since the epoch. PostgreSQL's own clock
  (every host of a fleet reads one clock); on SQLite the `:now` parameter,
  the store's clock (one host; a test's clock where a test gives one).
- `{body}`: the `:body` parameter, JSON text, stored as the database keeps
  JSON (`jsonb` on PostgreSQL, text on SQLite).
- `{body_text}`: the column `body` read back as JSON text.
- `{greatest}`: the function that takes the greater of two values
  (SQLite's two-argument `max`, PostgreSQL's `greatest`).
- `{for_update}`, `{for_share}`: after a query, the row locks PostgreSQL
  takes to order concurrent writes; nothing on SQLite, whose writes take
  the database's one write lock.
- `{expiring}`: after a table name in `FROM`, the hint that makes SQLite
  count expired tasks from the index of expiry times (its planner takes
  the owner's index otherwise); nothing on PostgreSQL.

A caller's text kept in a column a query compares (an owner, a context
id) goes through `key`: PostgreSQL's text holds no NUL character, so there
it is kept as its digest (`shared.keys.digest`); SQLite keeps it as it is.

A statement with no limit passes `unlimited` as its `LIMIT` (PostgreSQL
takes NULL, SQLite a negative number).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from shared.keys import digest

_PARAMETER: Final = re.compile(r"(?<![:\w]):(\w+)")


@dataclass(frozen=True)
class Dialect:
    name: str
    now: str
    body: str
    body_text: str
    greatest: str
    expiring: str
    for_update: str
    for_share: str
    # A caller's text as a column keeps it.
    key: Callable[[str], str]
    # How a `:name` parameter is written for the database's driver.
    parameter: str
    unlimited: int | None
    _compiled: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def compiled(self, text: str) -> str:
        """`text` in this database's SQL (kept: each statement is compiled once)."""
        done = self._compiled.get(text)
        if done is None:
            filled = text.format(
                now=self.now,
                body=self.body,
                body_text=self.body_text,
                greatest=self.greatest,
                expiring=self.expiring,
                for_update=self.for_update,
                for_share=self.for_share,
            )
            done = _PARAMETER.sub(lambda m: self.parameter.format(m.group(1)), filled)
            self._compiled[text] = done
        return done


POSTGRESQL: Final = Dialect(
    name="postgresql",
    now="extract(epoch FROM clock_timestamp())::float8",
    body="CAST(:body AS jsonb)",
    body_text="body::text",
    greatest="greatest",
    expiring="",
    for_update="FOR UPDATE",
    for_share="FOR SHARE",
    key=digest,
    parameter="%({})s",  # psycopg's named parameters
    unlimited=None,
)
SQLITE: Final = Dialect(
    name="sqlite",
    now=":now",
    body=":body",
    body_text="body",
    greatest="max",
    expiring="INDEXED BY tasks_expiring",
    for_update="",
    for_share="",
    key=str,
    parameter=":{}",
    unlimited=-1,
)
