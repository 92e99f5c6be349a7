"""Writes that count as done only once enough replicas hold them.

Redis replicates asynchronously: a master that acknowledged a write and then
died may not have sent it to the replica Sentinel promotes. With
TOOLNEXUS_REDIS_MIN_REPLICAS=N every write the service acknowledges or
relies on (a created task, a claim, each transition and result, a push
config and cursor) is followed on the same connection, in the same round
trip, by `WAIT N timeout`; when fewer than N replicas confirm it in time the
write is reported as NotReplicated (a store error the peer hears, which a
retry with the same messageId resolves), never as done.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from shared.errors import NotReplicated

KeysArgs = Sequence[Any]


def _nothing() -> None:
    pass


class Replicas:
    """Runs writes on `client`; with `count` > 0 each waits for that many replicas."""

    def __init__(
        self,
        client: redis.Redis,
        count: int = 0,
        timeout: float = 1.0,
        on_missed: Callable[[], None] = _nothing,
    ) -> None:
        self._client = client
        self.count = count
        self.timeout = timeout
        self._timeout_ms = max(1, int(timeout * 1000))
        self._on_missed = on_missed

    def script(self, script: Script, keys: KeysArgs, args: KeysArgs) -> Any:
        """Run a registered script, confirmed by the replicas when asked for."""
        if not self.count:
            return script(keys=keys, args=args)
        for _ in range(2):
            pipe: Any = self._client.pipeline(transaction=False)
            pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            (found,) = self._confirmed(pipe)
            if not isinstance(found, NoScriptError):
                if isinstance(found, Exception):
                    raise found
                return found
            # A master that never ran the script (a promoted replica, a restart).
            script.sha = self._client.script_load(script.script)
        raise found

    def command(self, *command: Any) -> Any:
        """Run one command, confirmed by the replicas when asked for."""
        if not self.count:
            return self._client.execute_command(*command)  # type: ignore[no-untyped-call]
        return self.pipeline(lambda pipe: pipe.execute_command(*command))[0]

    def pipeline(self, fill: Callable[[Any], object], *, tolerate: int = 0) -> list[Any]:
        """The results of the commands `fill` puts in one pipeline, in one
        round trip, confirmed by the replicas when asked for. The first error
        is raised, but for those of the last `tolerate` commands, which are
        returned as results."""
        pipe: Any = self._client.pipeline(transaction=False)
        fill(pipe)
        if not self.count:
            if not tolerate:
                return pipe.execute()  # type: ignore[no-any-return]
            results: list[Any] = pipe.execute(raise_on_error=False)
        else:
            results = self._confirmed(pipe)
        for result in results[: len(results) - tolerate]:
            if isinstance(result, Exception):
                raise result
        return results

    def _confirmed(self, pipe: Any) -> list[Any]:
        """Execute `pipe` with WAIT after it; the commands' results, each an
        exception where it failed (the caller decides which to retry)."""
        pipe.execute_command("WAIT", self.count, self._timeout_ms)
        found: list[Any] = pipe.execute(raise_on_error=False)
        results, confirmed = found[:-1], found[-1]
        if isinstance(confirmed, Exception):
            raise confirmed
        if int(confirmed) < self.count:
            self._on_missed()
            raise NotReplicated(
                f"task store unavailable: the write reached the Redis master but"
                f" {confirmed} of the {self.count} replicas asked for"
                f" (TOOLNEXUS_REDIS_MIN_REPLICAS) confirmed it within {self.timeout:g} s,"
                " so it may not survive a failover and is not acknowledged; retry"
                " (a send with the same messageId finds its task)",
                "replicas did not confirm a write in time",
            )
        return results
