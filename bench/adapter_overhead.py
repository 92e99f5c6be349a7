"""The Pydantic AI adapter's own cost per streamed token, in process.

    python3 bench/adapter_overhead.py [--tokens 2000] [--runs 20] [--rounds 5] [--quick]

One agent (bench/framework_agent.py's, its `FunctionModel` streaming
`--tokens` deltas a run), run `--runs` times each way, in turn, round after
round (the order swapped each round):

  * the framework alone: `agent.run_stream_events`, the text deltas
    appended to a list (the event stream the adapter reads);
  * through the adapter: the async generator `toolnexus.frameworks.adapt(agent)`
    gives, called with a message as a worker calls it, everything it yields
    appended to a list.

Printed: microseconds per token each way, and their difference (the
adapter's cost, its per-run cost spread over the run's tokens), as the
median of the per-round differences; the aim is at most 50 µs a token.
No server, no network: both run in this process, one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.framework_agent import streaming_agent, text_deltas

AIM_US = 50.0


def user_message(text: str) -> dict[str, Any]:
    """A received message, in the stored shape a worker hands an agent."""
    return {
        "kind": "message",
        "role": "user",
        "messageId": uuid.uuid4().hex,
        "parts": [{"kind": "text", "text": text}],
    }


def measures(tokens: int) -> dict[str, Callable[[int], Coroutine[Any, Any, int]]]:
    """Each way of running the agent `runs` times; each returns how many
    text pieces it saw, so both ways are checked to stream them all."""
    from toolnexus import Chunk
    from toolnexus.frameworks import adapt

    agent = streaming_agent(tuple(f"t{n} " for n in range(tokens)))
    adapted = adapt(agent)
    if adapted is None:
        raise SystemExit("toolnexus.frameworks does not recognize a Pydantic AI agent here")

    async def alone(runs: int) -> int:
        pieces: list[str] = []
        for _ in range(runs):
            async with agent.run_stream_events("question") as events:
                async for delta in text_deltas(events):
                    pieces.append(delta)
        return len(pieces)

    async def through_adapter(runs: int) -> int:
        items: list[object] = []
        for _ in range(runs):
            stream = cast(AsyncIterator[object], adapted(message=user_message("question")))
            async for item in stream:
                items.append(item)
        return sum(1 for item in items if isinstance(item, Chunk) and item.parts)

    return {"framework alone": alone, "through the adapter": through_adapter}


def timed(run: Callable[[int], Coroutine[Any, Any, int]], runs: int, tokens: int) -> float:
    """Microseconds per token of `runs` runs."""
    started = time.perf_counter()
    seen = asyncio.run(run(runs))
    took = time.perf_counter() - started
    if seen != runs * tokens:
        raise RuntimeError(f"{seen} text pieces streamed, {runs * tokens} expected")
    return took * 1e6 / (runs * tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=2000, help="tokens a run (default 2000)")
    parser.add_argument("--runs", type=int, default=20, help="runs a measure (default 20)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 rounds of 5 runs")
    args = parser.parse_args()
    if args.quick:
        args.tokens, args.runs, args.rounds = 1000, 5, 3
    print(
        f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}; {args.tokens} tokens a"
        f" run, {args.runs} runs a measure, {args.rounds} rounds",
        flush=True,
    )
    ways = measures(args.tokens)
    names = list(ways)
    for name in names:  # warm up: imports, first-call caches
        timed(ways[name], 1, args.tokens)
    figures: dict[str, list[float]] = {name: [] for name in names}
    for number in range(args.rounds):
        for name in names if number % 2 == 0 else reversed(names):
            figures[name].append(timed(ways[name], args.runs, args.tokens))
        print(
            f"   round {number + 1}: "
            + ", ".join(f"{name} {figures[name][-1]:.2f} µs" for name in names)
            + " a token",
            flush=True,
        )
    alone, adapted = figures["framework alone"], figures["through the adapter"]
    cost = statistics.median(b - a for a, b in zip(alone, adapted, strict=True))
    print(f"\nµs per token, median of {args.rounds} rounds")
    for name in names:
        print(f"   {name:<22} {statistics.median(figures[name]):8.2f}")
    verdict = "met" if cost <= AIM_US else "NOT met"
    print(
        f"   the adapter's cost     {cost:8.2f}   (median of the per-round differences;"
        f" aim <= {AIM_US:g} µs: {verdict})"
    )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
