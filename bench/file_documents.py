"""The file store's small documents and time indexes in this checkout
beside another checkout's, interleaved: steps of the turn book (a send
held and taken, then its end) and of a send limit, as a front end's
threads make them; a task created (`create`: it enters the waiting index),
and a progress event committed to a working task (`progress`: it moves in
the working index), as senders and workers make them.

    python3 bench/file_documents.py OTHER_CHECKOUT [--rounds 3] [--calls 2000] [--threads 4]

Each checkout runs in a process of its own, from its own directory (its
own code on `sys.path`, this interpreter's dependencies), on a fresh file
store directory of its own, under each fsync policy (`always`, the
default, and `no`). Rounds alternate which checkout goes first. Each figure
is the median over the rounds, steps a second; each ratio (this checkout
over the other) the median of the per-round ratios.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.processes import (  # noqa: E402
    in_checkout,
    print_ratios,
    side_by_side,
    side_by_side_options,
)

STEPS = ("turn book", "send limit", "create", "progress")
POLICIES = ("always", "no")

# Run in the checkout's own directory: the file store's documents, timed.
_MEASURE = """
import json, sys, threading, time
from shared.events import artifact_update
from shared.owners.book import Entry
from shared.stores.file.store import FileStore
from shared.task import WORKING, new_task, text_message
from shared.events import to_state
from shared.transitions import transition
folder, policy, step = sys.argv[1:4]
calls, threads = int(sys.argv[4]), int(sys.argv[5])
store = FileStore(folder, fsync=policy)
book, limiter = store.turn_book(), store.send_limiter()
book.register("worker@bench", 10**6, 3600)
ARTIFACT = {"artifactId": "a", "parts": [{"text": "x"}]}
chunk = lambda task: [artifact_update(task, ARTIFACT)]
mine = {}
for i in range(threads):
    task = store.create(new_task(text_message("user", "hi"), owner=f"owner-{i}")).task
    transition(store, task["id"], to_state(WORKING))
    mine[f"owner-{i}"] = task["id"]
start = threading.Barrier(threads + 1)
def run(owner):
    start.wait()
    for n in range(calls // threads):
        if step == "turn book":
            task = f"{owner}-{n}"
            assert book.hold_and_take([Entry(task, owner)], True) == [task]
            book.release_and_take([task], True)
        elif step == "send limit":
            assert limiter.take(owner, 1e9, 10**9) == 0.0
        elif step == "create":
            assert store.create(new_task(text_message("user", "hi"), owner=owner)).created
        else:
            assert transition(store, mine[owner], chunk, from_states={WORKING}).applied
failed = []
def guarded(owner):
    try:
        run(owner)
    except BaseException as error:  # a step that fails makes the figure void
        failed.append(error)
        raise
workers = [threading.Thread(target=guarded, args=(f"owner-{i}",)) for i in range(threads)]
for w in workers:
    w.start()
start.wait()
began = time.perf_counter()
for w in workers:
    w.join()
if failed:
    sys.exit(f"a step failed: {failed[0]!r}")
print(json.dumps(calls / (time.perf_counter() - began)))
"""


def measured(checkout: Path, *args: str) -> float:
    return float(in_checkout(checkout, _MEASURE, *args))


def main() -> None:
    options = side_by_side_options(__doc__.splitlines()[0])
    checkouts = {"this": ROOT, "other": options.other.resolve()}
    cases = [(policy, step) for policy in POLICIES for step in STEPS]
    with tempfile.TemporaryDirectory(prefix="toolnexus-bench-") as scratch:
        made = iter(range(10**9))

        def measure(name: str, policy: str, step: str) -> float:
            folder = Path(scratch) / f"store-{next(made)}"  # a fresh directory each time
            calls, threads = str(options.calls), str(options.threads)
            return measured(checkouts[name], str(folder), policy, step, calls, threads)

        figures = side_by_side(checkouts, options.rounds, cases, measure)
    print(f"{options.rounds} rounds, {options.calls} steps on {options.threads} threads each")
    print_ratios(figures, cases, "fsync")


if __name__ == "__main__":
    main()
