"""The embedded role's command line: `toolnexus-serve [--host H] [--port P] ...`.

Read by both `worker.cli.main` (which checks the flags before it patches
for gevent) and `worker.embedded` (which lays them over the environment).
Standard library only, like `worker.cli.main`.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence

from worker.command import PROGRAM, OneLineParser, package_version

# The embedded role's options -> the variables they override (worker.embedded
# lays them over the environment; Settings.from_env validates both alike).
EMBEDDED_OVERRIDES: Mapping[str, str] = {
    "host": "TOOLNEXUS_HOST",
    "port": "TOOLNEXUS_PORT",
    "store": "TOOLNEXUS_STORE",
    "run": "TOOLNEXUS_RUN",
    "skills": "TOOLNEXUS_SKILLS",
}


def parse_embedded_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = OneLineParser(
        prog=PROGRAM,
        description=(
            "Serve an A2A agent in one process: the front end, in-process workers and the"
            " reaper. The fleet's roles are subcommands: web, worker, beat, grpc and flower,"
            " and db manages the store"
            f" ({PROGRAM} <role> --help)."
        ),
        epilog="Every other setting comes from its TOOLNEXUS_* environment variable.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    parser.add_argument("--host", help="interface to bind (TOOLNEXUS_HOST, default 127.0.0.1)")
    parser.add_argument("--port", help="port to listen on (TOOLNEXUS_PORT, default 8080)")
    parser.add_argument(
        "--store", help="task store: memory, file:<dir>, ... (TOOLNEXUS_STORE, default memory)"
    )
    parser.add_argument("--run", help="fulfilment function package.module:function (TOOLNEXUS_RUN)")
    parser.add_argument("--skills", help="directory searched for **/SKILL.md (TOOLNEXUS_SKILLS)")
    parser.add_argument(
        "--grace",
        type=_grace,
        default=10.0,
        help="seconds running tasks get to finish on shutdown (default 10)",
    )
    return parser.parse_args(argv)


def _grace(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r}: give 0 or more seconds")
    return seconds
