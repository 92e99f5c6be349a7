"""Whether a `toolnexus-serve …` line would start as written: read by the
parser of its role, and what that parser leaves over by the program the role
hands it to (gunicorn, `celery worker`, `celery beat`, Flower), parsed the
way that program parses it. Nothing is run and no setting is read."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from collections.abc import Callable

import click
from celery import Celery
from celery.bin.base import CLIContext
from celery.bin.beat import beat as celery_beat
from celery.bin.worker import worker as celery_worker
from gunicorn.config import Config

from worker.cli.db import ACTIONS
from worker.cli.main import ROLES, role_parser
from worker.cli.tasks import parser as tasks_parser
from worker.embedded_flags import parse_embedded_args

_OPTION_LINE = re.compile(r"^\s+(?:-\w, )?(--[\w-]+)", re.M)


def refusal(argv: list[str]) -> str | None:
    """Why `toolnexus-serve *argv` would stop before it starts, or None."""
    if argv and argv[0] in ROLES:
        return _role_refusal(argv[0], argv[1:])
    refused, _ = _parsed(lambda: parse_embedded_args(argv))
    return refused


def flags(role: str | None) -> set[str]:
    """The flags a role's `--help` lists (None: the embedded server's), but --help."""
    if role is None:
        _, shown = _parsed(lambda: parse_embedded_args(["--help"]))
    else:
        shown = role_parser(ROLES[role]).format_help()
    return set(_OPTION_LINE.findall(shown)) - {"--help"}


def _parsed(parse: Callable[[], object]) -> tuple[str | None, str]:
    """(Why the parser refused, or None; what it printed.)"""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            parse()
        except SystemExit as exit_:
            if exit_.code not in (0, None):
                said = err.getvalue().strip().splitlines() or [f"exit status {exit_.code}"]
                return said[-1], out.getvalue()  # the refusal, after any usage
    return None, out.getvalue()


def passes_on_for_every_role() -> bool:
    """Whether each role has its check of what it passes on."""
    return set(_PASSED_ON) == set(ROLES)


def _role_refusal(role: str, argv: list[str]) -> str | None:
    rest: list[str] = []

    def parse() -> None:
        rest.extend(role_parser(ROLES[role]).parse_known_args(argv)[1])

    refused, _ = _parsed(parse)
    if refused is not None or "--help" in argv or "-h" in argv:
        return refused
    return _PASSED_ON[role](rest)


def _gunicorn(rest: list[str]) -> str | None:
    parser = Config().parser()
    parsed: list[argparse.Namespace] = []
    refused, _ = _parsed(lambda: parsed.append(parser.parse_args(rest)))
    if refused is None and parsed[0].args:
        return f"gunicorn is given an app ({' '.join(parsed[0].args)}): the role names its own"
    return refused


def _celery(command: click.Command) -> Callable[[list[str]], str | None]:
    def check(rest: list[str]) -> str | None:
        app = Celery(set_as_current=False)
        context = CLIContext(app=app, no_color=True, workdir=None, quiet=True)
        try:
            command.make_context(f"celery {command.name}", list(rest), obj=context)
        except click.ClickException as error:
            return f"celery {command.name}: {error.format_message()}"
        return None

    return check


def _flower(rest: list[str]) -> str | None:
    import flower.options  # noqa: F401  (defines Flower's options)
    from tornado.options import options

    for word in rest:
        name = word.removeprefix("--").partition("=")[0]
        if not word.startswith("--") or name not in options:
            return f"Flower has no option {word!r}"
    return None


def _nothing(rest: list[str]) -> str | None:
    return f"unrecognized arguments: {' '.join(rest)}" if rest else None


def _db(rest: list[str]) -> str | None:
    if len(rest) == 1 and rest[0] in ACTIONS:
        return None
    if rest[:1] == ["copy"] and len(rest) == 2:
        return None
    return f"db takes {', '.join(ACTIONS)} or copy TARGET, not {' '.join(rest) or 'nothing'}"


def _tasks(rest: list[str]) -> str | None:
    refused, _ = _parsed(lambda: tasks_parser().parse_args(rest))
    return refused


_PASSED_ON: dict[str, Callable[[list[str]], str | None]] = {
    "web": _gunicorn,
    "worker": _celery(celery_worker),
    "beat": _celery(celery_beat),
    "flower": _flower,
    "grpc": _nothing,
    "db": _db,
    "tasks": _tasks,
}
