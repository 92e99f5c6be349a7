"""`toolnexus-serve`: one command for every role.

    toolnexus-serve [--host H] [--port P] ...   the whole service in one process (embedded)
    toolnexus-serve web [--host H] [--port P]   the front end: gunicorn + gevent workers
    toolnexus-serve grpc [--host H] [--port P]  the gRPC binding, on web's store and broker
    toolnexus-serve worker                       a Celery worker running the agent
    toolnexus-serve beat                         the one beat: the reaper and the resender
    toolnexus-serve flower [--port P]            Flower, every page behind its login
    toolnexus-serve db upgrade|status            the PostgreSQL store's schema
    toolnexus-serve db copy TARGET               every task into another store
    toolnexus-serve tasks list|show|rerun        failed tasks: grouped, shown, run again

Each role works from any directory: the current one is importable for the
agent (`--run myagent:fn` finds ./myagent.py, as gunicorn and Celery find
their apps), after the installed packages, so a file there never shadows
this service's own modules. The serving configuration is the packaged
`web.http.gunicorn_conf`. `--help` needs no settings. A flag sets its
`TOOLNEXUS_*` variable for the role and every process it starts; the
settings are then checked together, and a bad one stops the role with one
line naming it and exit status 2, before gunicorn or Celery start. Options
this command does not know go on to gunicorn, `celery worker`, `celery beat`
or Flower unchanged.

Nothing is imported at module level beyond the standard library and the
command's own parsers (`worker.command`, `worker.embedded_flags`,
standard library only themselves): the embedded and web roles patch it for
gevent first of all.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from worker.command import PROGRAM, OneLineParser
from worker.embedded_flags import parse_embedded_args


@dataclass(frozen=True)
class Flag:
    """A flag that sets one environment variable."""

    name: str
    variable: str
    help: str


STORE = Flag("--store", "TOOLNEXUS_STORE", "task store: redis://..., file:<dir>, ...")
BROKER = Flag("--broker", "TOOLNEXUS_BROKER_URL", "Celery broker URL")
RUN = Flag("--run", "TOOLNEXUS_RUN", "the agent, package.module:function")
QUEUE = Flag("--queue", "TOOLNEXUS_QUEUE", "Celery queue the front end sends to")
HOST = Flag("--host", "TOOLNEXUS_HOST", "interface to bind (0.0.0.0: every one)")
PORT = Flag("--port", "TOOLNEXUS_PORT", "port to listen on")
SKILLS = Flag("--skills", "TOOLNEXUS_SKILLS", "directory searched for **/SKILL.md")
LOG_LEVEL = Flag("--log-level", "TOOLNEXUS_LOG_LEVEL", "level of the service's own lines")
CONCURRENCY = Flag(
    "--concurrency",
    "TOOLNEXUS_CONCURRENCY",
    "worker processes (prefork), or I/O calls at once (I/O pools)",
)
POOL = Flag("--pool", "TOOLNEXUS_POOL", "prefork, or threads/asyncio for agents that mostly wait")
STATE_DIR = Flag("--state-dir", "TOOLNEXUS_STATE_DIR", "where beat keeps its schedule")
WORKERS = Flag("--workers", "WEB_CONCURRENCY", "gunicorn worker processes (default: CPU count)")
GRPC_HOST = Flag("--host", "TOOLNEXUS_GRPC_HOST", "interface the gRPC server binds")
GRPC_PORT = Flag("--port", "TOOLNEXUS_GRPC_PORT", "the gRPC server's port (default 50051)")
FLOWER_PORT = Flag("--port", "FLOWER_PORT", "Flower's port (default 5555)")
FLOWER_ADDRESS = Flag("--address", "FLOWER_ADDRESS", "Flower's interface (default: all)")


@dataclass(frozen=True)
class Role:
    name: str
    summary: str
    flags: tuple[Flag, ...]
    run: Callable[[list[str]], int]
    passes_to: str


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    _importable_cwd()
    if args and args[0] in ROLES:
        role = ROLES[args[0]]
        return _run_role(role, args[1:])
    return _embedded(args)


def _importable_cwd() -> None:
    """The current directory, searched after the installed packages."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def role_parser(role: Role) -> argparse.ArgumentParser:
    """The role's own flags; what it leaves goes on to the program the role runs."""
    parser = OneLineParser(
        prog=f"{PROGRAM} {role.name}",
        description=role.summary,
        epilog=(
            f"Every other setting comes from its TOOLNEXUS_* environment variable; options"
            f" not listed here go on to {role.passes_to}."
        ),
    )
    for flag in role.flags:
        parser.add_argument(flag.name, dest=flag.variable, metavar="VALUE", help=_help(flag))
    return parser


def _help(flag: Flag) -> str:
    return f"{flag.help} ({flag.variable})"


def _run_role(role: Role, argv: list[str]) -> int:
    known, rest = role_parser(role).parse_known_args(argv)
    for variable, value in vars(known).items():
        if value is not None:
            os.environ[variable] = value
    return role.run(rest)


def _embedded(argv: list[str]) -> int:
    parse_embedded_args(argv)  # --help, --version and bad options: before anything is patched
    from gevent import monkey

    monkey.patch_all()
    from worker import embedded

    return embedded.main(argv)


def _refuse(error: object) -> int:
    print(f"{PROGRAM}: {error}", file=sys.stderr)
    return 2


def _web(rest: list[str]) -> int:
    from gevent import monkey

    monkey.patch_all()  # as web.http.gunicorn_conf does: before redis-py, kombu, Flask
    from shared.addresses import listening_socket
    from shared.errors import ToolnexusError
    from shared.ops.startup import refuse_private_store
    from shared.settings import Settings
    from shared.store.wiring import load_hook, open_store

    try:
        settings = Settings.from_env()
        open_store(settings)
        load_hook(settings)
        refuse_private_store(settings, f"{PROGRAM} web")
        if not _binds_elsewhere(rest):
            # Only to tell a taken port in one line; gunicorn binds it itself.
            listening_socket(settings.host, settings.port).close()
    except (ToolnexusError, ValueError, OSError) as error:  # a bad setting, a port taken
        return _refuse(error)
    from gunicorn.app.wsgiapp import WSGIApplication

    sys.argv = [f"{PROGRAM} web", "-c", "python:web.http.gunicorn_conf", *rest, "web:create_app()"]
    WSGIApplication(f"{PROGRAM} web [OPTIONS]").run()
    return 0


def _grpc(rest: list[str]) -> int:
    from shared.errors import ToolnexusError
    from shared.ops.startup import refuse_private_store
    from shared.settings import Settings
    from shared.store.wiring import load_hook, open_store

    try:
        settings = Settings.from_env()
        open_store(settings)
        load_hook(settings)
        refuse_private_store(settings, f"{PROGRAM} grpc")
    except (ToolnexusError, ValueError, OSError) as error:  # a bad setting
        return _refuse(error)
    # The gRPC server's own module takes over this process (as gunicorn loads
    # web:create_app() by name): the launcher imports no web code itself.
    os.execv(sys.executable, [sys.executable, "-m", "web.grpc_process", *rest])


def _binds_elsewhere(gunicorn_options: list[str]) -> bool:
    """True when gunicorn's own -b (a flag or GUNICORN_CMD_ARGS) picks the address."""
    given = [*gunicorn_options, *os.environ.get("GUNICORN_CMD_ARGS", "").split()]
    return any(option.startswith(("-b", "--bind")) for option in given)


def _celery_settings(program: str) -> int | None:
    """The checks `worker.app` makes, here, so a bad setting is one line with
    this command's name before Celery starts; None when all is well."""
    from shared.errors import ToolnexusError
    from shared.ops.startup import refuse_private_store
    from shared.settings import Settings
    from shared.store.wiring import open_store
    from worker.engine.agent import load_agent

    try:
        settings = Settings.from_env()
        load_agent(settings)
        open_store(settings)
        refuse_private_store(settings, program)
    except (ToolnexusError, ValueError) as error:  # a bad setting, a store refusing its folder
        return _refuse(error)
    return None


def _celery(arguments: list[str]) -> int:
    from celery.bin.celery import main as celery_main

    sys.argv = ["celery", "-A", "worker", *arguments]
    return _exit_status(celery_main)


def _exit_status(program: Callable[[], object]) -> int:
    """Run a click program (Celery's, Flower's), which ends by raising SystemExit."""
    try:
        program()
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    return 0


def _worker(rest: list[str]) -> int:
    if (refused := _celery_settings(f"{PROGRAM} worker")) is not None:
        return refused
    # Without mingle: a worker that starts, or reconnects after the broker was
    # lost, asks the others for the tasks they revoked and waits for their
    # answers (seconds, each time); a cancel is already final in the store,
    # which every delivery checks before it runs.
    return _celery(["worker", "--loglevel=INFO", "--without-mingle", *rest])


def _beat(rest: list[str]) -> int:
    if (refused := _celery_settings(f"{PROGRAM} beat")) is not None:
        return refused
    # The schedule goes to TOOLNEXUS_STATE_DIR (worker.runtime.app), and no
    # pid file is written, so a restart never finds a stale one in its way.
    return _celery(["beat", "--loglevel=INFO", "--pidfile=", *rest])


def _flower(rest: list[str]) -> int:
    if (refused := _celery_settings(f"{PROGRAM} flower")) is not None:
        return refused
    from worker.runtime.flower_login import main as flower_main

    # Flower reads FLOWER_PORT and FLOWER_ADDRESS itself.
    return _exit_status(lambda: flower_main(rest))


def _db(rest: list[str]) -> int:
    from worker.cli.db import run

    return run(rest, f"{PROGRAM} db")


def _tasks(rest: list[str]) -> int:
    from worker.cli.tasks import run

    return run(rest, f"{PROGRAM} tasks")


_COMMON = (STORE, BROKER, RUN, QUEUE, LOG_LEVEL)
ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        Role(
            "web",
            "The front end: gunicorn with gevent workers, the packaged configuration.",
            (HOST, PORT, WORKERS, STORE, BROKER, QUEUE, SKILLS, LOG_LEVEL),
            _web,
            "gunicorn",
        ),
        Role(
            "grpc",
            "The gRPC binding (lf.a2a.v1.A2AService), on the same store and broker as web.",
            (GRPC_HOST, GRPC_PORT, STORE, BROKER, QUEUE, LOG_LEVEL),
            _grpc,
            "nothing (no other options)",
        ),
        Role(
            "worker",
            "A Celery worker running the agent; start as many as you like.",
            (*_COMMON, CONCURRENCY, POOL),
            _worker,
            "`celery worker` (e.g. --hostname)",
        ),
        Role(
            "beat",
            "Celery beat with the reaper and the resender; run exactly one.",
            (*_COMMON, STATE_DIR),
            _beat,
            "`celery beat`",
        ),
        Role(
            "flower",
            "Flower, with every page (metrics and health check too) behind FLOWER_BASIC_AUTH.",
            (FLOWER_PORT, FLOWER_ADDRESS, BROKER, STORE),
            _flower,
            "Flower",
        ),
        Role(
            "db",
            "The PostgreSQL store's schema: `upgrade` applies the migrations it lacks,"
            " `status` says where it stands (exit 1: behind); `copy TARGET` saves every task"
            " into another store.",
            (STORE,),
            _db,
            "nothing (upgrade or status)",
        ),
        Role(
            "tasks",
            "Failed tasks: `list --state failed` groups the newest by reason, `show ID` prints"
            " one, `rerun ID...` asks the service (TOOLNEXUS_URL, TOOLNEXUS_TOKEN) to run them"
            " again as new tasks.",
            (STORE,),
            _tasks,
            "nothing (list, show or rerun)",
        ),
    )
}


if __name__ == "__main__":
    sys.exit(main())
