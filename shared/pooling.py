"""How long a call waits for a pooled connection to Redis, the same for the
Redis task store and the Redis broker queue.

It imports nothing, so the store and the broker share it without depending
on each other.
"""

from __future__ import annotations

from typing import Final

# The longest a call waits for one of its pool's connections (at least the
# call's own timeout). Not the connect timeout: a gevent front end taking a
# burst of blocking sends has most of them queued behind the connections in
# flight while it parses the rest, so the wait is for the process's CPU, not
# for Redis, and it is bounded like a request: gunicorn's worker timeout
# (tests/test_web_broker_burst.py). A Redis that refuses connections still
# fails a call at once (its connection goes back to the pool); a stalled one
# fails each call within this wait plus its socket timeouts.
POOL_WAIT: Final = 30.0
