"""Run one benchmark and write what it printed into the figures page.

    python3 bench/record.py stores --quick      # any of: web throughput stores streams flood

The script's own output goes, as it printed it, into
docs/benchmark-figures.md, in that benchmark's section, with the date, the
commit and the machine: the figures come from the script, not from a copy
typed into the page. A new run of the same benchmark replaces its block; the
prose around it (what the figures mean) is the page's own. Nothing is
written when the script fails.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmark-figures.md"
# Each benchmark's section of the page.
SECTIONS = {
    "web": "## The front end",
    "throughput": "## The pipeline",
    "stores": "## Stores",
    "streams": "## Streams",
    "flood": "## A hostile client",
}


def marks(name: str) -> tuple[str, str]:
    return f"<!-- recorded: {name} -->", f"<!-- end recorded: {name} -->"


def with_recording(page: str, name: str, block: str) -> str:
    """`page` with `block` as `name`'s recorded output: in place of an
    earlier one, or at the end of its section."""
    begin, end = marks(name)
    recorded = f"{begin}\n{block.rstrip()}\n{end}"
    if begin in page and end in page:
        before, _, rest = page.partition(begin)
        _, _, after = rest.partition(end)
        return before + recorded + after
    heading = SECTIONS[name]
    at = page.index(heading)
    following = page.find("\n## ", at + len(heading))
    cut = len(page.rstrip()) if following < 0 else following
    return page[:cut].rstrip() + "\n\n" + recorded + "\n" + page[cut:]


def block_for(name: str, args: list[str], output: str, commit: str, when: str) -> str:
    command = " ".join(["python3", f"bench/{name}.py", *args])
    machine = f"{os.cpu_count()} cores, Python {platform.python_version()}"
    return (
        f"Recorded {when} by `bench/record.py` on commit `{commit}` ({machine}):"
        f" `{command}` printed\n\n```text\n{output.strip()}\n```\n"
    )


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in SECTIONS:
        print(f"usage: python3 bench/record.py {{{','.join(SECTIONS)}}} [options]", file=sys.stderr)
        return 2
    name, args = argv[0], argv[1:]
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{name}.py"), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    sys.stdout.write(run.stdout)
    if run.returncode != 0:
        failed = f"record: bench/{name}.py failed ({run.returncode}); nothing written"
        print(failed, file=sys.stderr)
        return run.returncode
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    block = block_for(name, args, run.stdout, commit or "unknown", when)
    PAGE.write_text(with_recording(PAGE.read_text(), name, block))
    print(f"record: bench/{name}.py's output written to {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
