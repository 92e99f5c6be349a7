"""The Redis store's own turn book (one Lua script a step) beside the turn book
written once over small documents (`DocumentBook` over the store's Redis
documents), on one private redis-server, interleaved: whether the
accelerator is worth keeping (it stays only where it is at least 1.3x).

    python3 bench/turn_book.py [--rounds 3] [--steps 2000] [--threads 4] [--long 0]

A measure is `--threads` threads, as the front ends and workers of a fleet
are, each making `--steps`/`--threads` sends and delivery ends in turn: a
task held and taken (`hold_and_take`), then released (`release_and_take`),
for an owner of its own, against a book where a worker registered enough
slots that every task runs at once, and where `--long` tasks of another
owner are in flight all along (a fuller book costs the document more: it
is read and written whole at each step).
Rounds alternate which book goes first; each figure is the median over the
rounds, steps a second (a send and its end are two); the ratio is the
accelerator's over the document book's, the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from shared.owners.book import DocumentBook, Entry, TurnBook  # noqa: E402
from shared.stores.redis.documents import RedisDocuments  # noqa: E402
from shared.stores.redis.turns import RedisTurnBook  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

BOOKS: dict[str, Callable[[redis.Redis, str], TurnBook]] = {
    "script": lambda client, prefix: RedisTurnBook(client, prefix),
    "document": lambda client, prefix: DocumentBook(RedisDocuments(client, prefix)),
}


def measure(book: TurnBook, steps: int, threads: int, long: int, tag: str) -> float:
    book.register(f"worker-{tag}", steps + long + 10, 600.0)
    if long:  # long runs of another owner's: in flight all along
        book.hold_and_take([Entry(f"{tag}-long-{n}", "long") for n in range(long)], True)
    start = threading.Barrier(threads + 1)

    def run(worker: int) -> None:
        owner = f"owner-{worker}"
        start.wait()
        for n in range(steps // threads // 2):
            task = f"{tag}-{worker}-{n}"
            book.hold_and_take([Entry(task, owner)], True)
            book.release_and_take([task], True)

    running = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for thread in running:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in running:
        thread.join()
    return (steps // threads // 2 * 2 * threads) / (time.perf_counter() - began)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--long", type=int, default=0)
    options = parser.parse_args()
    server = RedisServer().start()
    try:
        figures: dict[str, list[float]] = {name: [] for name in BOOKS}
        for round_ in range(options.rounds):
            order = list(BOOKS) if round_ % 2 == 0 else list(reversed(BOOKS))
            for name in order:
                client = redis.Redis.from_url(f"{server.url}/{round_ + 1}")
                book = BOOKS[name](client, f"bench-{name}-{round_}:")
                figures[name].append(
                    measure(book, options.steps, options.threads, options.long, f"r{round_}")
                )
                client.close()
        ratio = statistics.median(
            a / b for a, b in zip(figures["script"], figures["document"], strict=True)
        )
        print(
            f"{options.rounds} rounds, {options.steps} steps on {options.threads} threads,"
            f" {options.long} long"
        )
        for name, rates in figures.items():
            print(f"{name:9} {statistics.median(rates):8.0f} steps/s  {[round(r) for r in rates]}")
        print(f"script / document: {ratio:.2f}")
    finally:
        server.close()


if __name__ == "__main__":
    main()
