"""The command's name and the argument parser every one of its roles uses.

Standard library only: the command imports this before it patches for gevent.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from typing import NoReturn

PROGRAM = "toolnexus-serve"


class OneLineParser(argparse.ArgumentParser):
    """argparse, whose refusals are one line and exit status 2 like every
    other bad setting (argparse's own print the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def package_version() -> str:
    try:
        return metadata.version("toolnexus-serve")
    except metadata.PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown"
