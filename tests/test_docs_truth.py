"""What the README and docs/ tell a newcomer holds for the code as it stands.

- Settings: every `TOOLNEXUS_*` name in the docs (and in the shipped code's
  comments) is one the service, compose or the tests read; every name the
  service or compose reads is on the configuration page, and every name only
  the tests read is on the test-suite page. A renamed setting is named only
  beside its new name.
- Commands: every `toolnexus-serve …` line parses with its role's own
  parser, and what the role passes on with the parser of the program it goes
  to; the running page lists every role with exactly its flags; a URL in a
  shell line is quoted; a compose profile with a file of its own is named
  with that file.
- Tests: every test, test module and test folder a doc names exists.
- Places: no doc points outside the repository but by URL, and every script
  a doc names is one the repository has.
- Metrics: every `toolnexus_…` name in the docs and in the shipped code's
  comments and docstrings is a metric the service exports (with the suffixes
  Prometheus adds), or a name the code uses for something else.
- Answers: the bodies and headers the endpoint page shows are the ones the
  service sends.
- The opening: the README's first screen and the site's home page name every
  binding, every built-in store and every role.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

from shared import Settings, memory_store
from shared.settings import CARD_BINDINGS, RENAMED
from tests.support.cli_lines import flags, passes_on_for_every_role, refusal
from tests.support.code_names import (
    METRIC,
    exported_metrics,
    other_names,
    prose,
    read_by_the_service,
    read_by_the_tests,
    settings_in,
    shipped_files,
)
from tests.support.docs_text import (
    LINK_TARGET,
    ROOT,
    Spot,
    code_lines,
    commands,
    lines,
    pages,
    paragraphs,
    snippets,
    without_places,
)
from tests.test_web_support import PlayingDispatcher
from web import create_app
from web.http.observe import CountingDispatcher
from worker.cli.main import ROLES
from worker.command import PROGRAM
from worker.engine.agent import load_agent
from worker.engine.inprocess import InProcessDispatcher

README = ROOT / "README.md"
CONFIGURATION = ROOT / "docs" / "configuration.md"
TEST_SUITE = ROOT / "docs" / "test-suite.md"
RUNNING = ROOT / "docs" / "running.md"
ENDPOINT = ROOT / "docs" / "endpoint.md"
HOME = ROOT / "docs" / "index.md"

# --- settings ---------------------------------------------------------------


def named_settings() -> Iterator[tuple[Spot, str]]:
    spots = [spot for page in pages() for spot in lines(page)]
    spots += [spot for path in shipped_files() for spot in prose(path, strings=False)]
    for spot in spots:
        for name in sorted(settings_in(spot.text)):
            yield spot, name


def test_every_setting_the_docs_name_is_read() -> None:
    read = read_by_the_service() | read_by_the_tests(but=Path(__file__))
    wrong = [f"{spot}\n    {name}" for spot, name in named_settings() if name not in read]
    assert wrong == [], "named but read nowhere:\n" + "\n".join(wrong)


def test_every_setting_read_is_on_the_configuration_page() -> None:
    configured = settings_in(CONFIGURATION.read_text())
    described = settings_in(TEST_SUITE.read_text())
    wrong = [f"{name}: not in docs/configuration.md" for name in read_by_the_service() - configured]
    wrong += [
        f"{name}: read only by the tests, not in docs/test-suite.md"
        for name in read_by_the_tests(but=Path(__file__)) - described
    ]
    assert sorted(wrong) == [], "\n".join(sorted(wrong))


def test_a_renamed_setting_is_named_only_beside_its_new_name() -> None:
    wrong = [
        f"{spot}\n    {name} without {RENAMED[name]}"
        for spot, name in named_settings()
        if name in RENAMED and RENAMED[name] not in spot.text
    ]
    assert wrong == [], "\n".join(wrong)


# --- commands ---------------------------------------------------------------


def command_lines() -> Iterator[tuple[Spot, list[str] | None]]:
    """Each run of the command in the docs, with its arguments (None: not a
    shell line); `<role>` stands for each role in turn."""
    for page in pages():
        for spot in snippets(page):
            if PROGRAM not in spot.text:
                continue
            each = [spot.text.replace("<role>", role) for role in ROLES]
            for text in each if "<role>" in spot.text else [spot.text]:
                try:
                    runs = list(commands(text, PROGRAM))
                except ValueError:
                    yield spot, None
                    continue
                for argv in runs:
                    yield spot, argv


def test_every_command_line_in_the_docs_parses() -> None:
    assert passes_on_for_every_role()
    wrong = []
    seen = 0
    for spot, argv in command_lines():
        seen += 1
        why = "not a shell line" if argv is None else refusal(argv)
        if why is not None:
            wrong.append(f"{spot}\n    {why}")
    assert seen > 50, "the docs' commands were not found"
    assert wrong == [], "\n".join(wrong)


def table_rows(page: Path, header: str) -> list[list[str]]:
    """The cells of each row of the table whose header row starts with `header`."""
    rows: list[list[str]] = []
    inside = False
    for spot in lines(page):
        if spot.text.startswith(header):
            inside = True
        elif inside and not spot.text.startswith("|"):
            break
        elif inside and not spot.text.startswith("|---"):
            rows.append([cell.strip() for cell in spot.text.strip("|").split("|")])
    assert rows, f"{page.relative_to(ROOT)} has no table headed {header!r}"
    return rows


def test_the_running_page_lists_every_role_with_its_flags() -> None:
    wrong = []
    # A row's first cell starts with the command and its role: `toolnexus-serve db upgrade`, ….
    rows = table_rows(RUNNING, "| command |")
    listed = {tuple(row[0].strip("`").split("`")[0].split()[:2]) for row in rows}
    for command in [(PROGRAM,), *((PROGRAM, role) for role in ROLES)]:
        if command not in listed:
            wrong.append(f"roles table: no row for {' '.join(command)}")
    flagged = {
        row[0]: set(re.findall(r"`(--[\w-]+)`", row[1]))
        for row in table_rows(RUNNING, "| role | flags")
    }
    for row, role in [("(none)", None), *((f"`{role}`", role) for role in ROLES)]:
        has = flags(role)
        shown = flagged.get(row)
        if shown is None:
            wrong.append(f"flags table: no row for {row}")
        elif shown != has:
            wrong.append(
                f"flags table, {row}: lacks {sorted(has - shown)}, has {sorted(shown - has)}"
            )
    assert wrong == [], "\n".join(wrong)


# A word a shell may take for a pattern: zsh stops on one that matches no file.
PATTERN = re.compile(r"[?*\[]")


def test_every_url_in_a_shell_line_is_quoted() -> None:
    wrong = []
    for page in pages():
        for spot in code_lines(page):
            lexer = shlex.shlex(spot.text, posix=False)
            lexer.whitespace_split = True
            lexer.commenters = "#"
            try:
                each = list(lexer)
            except ValueError:
                continue  # not a shell line (an apostrophe in prose or code)
            for word in each:
                bare = word[:1] not in "'\""
                if (
                    bare
                    and re.match(r"(\w+://|localhost:|127\.0\.0\.1:)", word)
                    and PATTERN.search(word)
                ):
                    wrong.append(f"{spot}\n    {word}")
    assert wrong == [], "\n".join(wrong)


def compose_profiles_with_a_file() -> set[str]:
    """The profiles compose.yaml declares that need their own file too
    (`compose.<profile>.yaml`: it points the other services at what the profile starts)."""
    declared = set(re.findall(r'profiles: \["(\w+)"\]', (ROOT / "compose.yaml").read_text()))
    return {profile for profile in declared if (ROOT / f"compose.{profile}.yaml").is_file()}


def test_a_compose_profile_with_its_own_file_is_named_with_that_file() -> None:
    profiles = compose_profiles_with_a_file()
    assert {"rabbitmq", "postgres"} <= profiles
    wrong = []
    for page in pages():
        for spot in paragraphs(page):
            named = set(re.findall(r"--profile[ =](\w+)", spot.text))
            for listed in re.findall(r"COMPOSE_PROFILES=([\w,]+)", spot.text):
                named |= set(listed.split(","))
            for profile in sorted(named & profiles):
                if f"compose.{profile}.yaml" not in spot.text:
                    wrong.append(f"{spot}\n    --profile {profile} without compose.{profile}.yaml")
    assert wrong == [], "\n".join(wrong)


# --- tests ------------------------------------------------------------------

# Tests of the official A2A conformance kits (a2aproject/a2a-tck), which the
# docs discuss by name.
KIT_TESTS = {
    "test_get_push_notification_config",
    "test_version_not_supported_returns_unimplemented",
    "test_tasks_resubscribe_nonexistent",
    "test_unsupported_operation_returns_400",
    "test_content_type_not_supported_returns_415",
}
# A test module of the reader's own, in the docs' examples.
EXAMPLES = {"test_x", "test_mystore"}
TEST_NAME = re.compile(r"(?<![\w/.*-])(tests/[\w/.*-]*\w(?:/|::[\w*]+)?|test_[\w*]+(?:\.py)?)")


def defined_tests(path: Path) -> set[str]:
    return set(re.findall(r"^\s*(?:async\s+)?def\s+(test_\w+)", path.read_text(), re.M))


def matches(pattern: str, names: set[str]) -> bool:
    regex = re.compile(re.escape(pattern).replace(r"\*", r"\w*"))
    return any(regex.fullmatch(name) for name in names)


def test_every_test_the_docs_name_exists() -> None:
    modules = sorted(ROOT.glob("tests/**/test_*.py"))
    everything = {name for module in modules for name in defined_tests(module)}
    everything |= {module.stem for module in modules}
    wrong = []
    for page in pages():
        for spot in lines(page):
            for found in TEST_NAME.findall(without_places(spot.text)):
                path, _, function = found.partition("::")
                stem = Path(path).name.removesuffix(".py")
                if stem in KIT_TESTS or stem in EXAMPLES:
                    continue
                if path.startswith("tests/"):
                    held = sorted(ROOT.glob(path.rstrip("/")))
                    if not held or (function and not matches(function, defined_tests(held[0]))):
                        wrong.append(f"{spot}\n    {found}")
                elif not matches(stem, everything):
                    wrong.append(f"{spot}\n    {found}")
    assert wrong == [], "\n".join(wrong)


# --- places -----------------------------------------------------------------

# Values the docs show that only look like places (a hostile context id).
NOT_PLACES = {"../../etc"}
UP = re.compile(r"(?<![\w.~/-])(?:\.\./)+[\w.*/-]*")
SCRIPT = re.compile(r"(?<![\w.-])[\w.~/-]*\w\.sh\b(?!/)")


def test_no_doc_points_outside_the_repository() -> None:
    wrong = []
    for page in pages():
        for spot in lines(page):
            for target in LINK_TARGET.findall(spot.text):
                path = target.partition("#")[0]
                if "://" in path or not path:
                    continue
                if not (page.parent / path).resolve().is_relative_to(ROOT):
                    wrong.append(f"{spot}\n    links to {target}")
            for up in UP.findall(without_places(spot.text)):
                if up not in NOT_PLACES:
                    wrong.append(f"{spot}\n    names {up}")
    assert wrong == [], "\n".join(wrong)


def test_every_script_the_docs_name_is_in_the_repository() -> None:
    tools = {path.name for path in (ROOT / "tools").iterdir()}
    wrong = []
    for page in pages():
        for spot in lines(page):
            for script in SCRIPT.findall(without_places(spot.text)):
                held = (ROOT / script).is_file() if "/" in script else script in tools
                if not held or script.startswith(("/", "~", "..")):
                    wrong.append(f"{spot}\n    {script}")
    assert wrong == [], "\n".join(wrong)


# --- metrics ----------------------------------------------------------------

# A metric's former name, named only beside the one it has now.
FORMER_METRICS = {"toolnexus_calls_held": "toolnexus_io_calls"}


def named_metrics() -> Iterator[tuple[Spot, str]]:
    spots = [spot for page in pages() for spot in lines(page)]
    spots += [spot for path in shipped_files() for spot in prose(path, strings=True)]
    for spot in spots:
        for name in METRIC.findall(without_places(spot.text)):
            yield spot, name


def test_every_metric_named_is_one_the_service_exports() -> None:
    known = exported_metrics() | other_names()
    assert "toolnexus_requests_total" in known, "the metrics were not found"
    wrong = []
    for spot, name in named_metrics():
        former = FORMER_METRICS.get(name)
        if name in known or (former is not None and former in spot.text):
            continue
        wrong.append(f"{spot}\n    {name}")
    assert wrong == [], "\n".join(wrong)


# --- answers ----------------------------------------------------------------


def answers(embedded: bool) -> Iterator[tuple[str, str, str | None]]:
    """(what was asked, the body, the Allow header) for what the endpoint
    page shows, from a front end of the fleet or the embedded server."""
    settings = Settings()
    store = memory_store()
    store.record_beat()
    inner = InProcessDispatcher(store, load_agent(settings), settings, threads=1)
    dispatcher = CountingDispatcher(inner) if embedded else PlayingDispatcher(store)
    try:
        http = create_app(settings, store=store, dispatcher=dispatcher).test_client()
        asked = (
            [("GET", "/readyz")]
            if embedded
            else [
                ("GET", "/healthz"),
                ("GET", "/readyz"),
                ("GET", "/no-such-route"),
                ("PUT", "/"),
                ("POST", "/healthz"),
            ]
        )
        for method, path in asked:
            reply = http.open(path, method=method)
            yield f"{method} {path}", reply.get_data(as_text=True), reply.headers.get("Allow")
    finally:
        inner.close(timeout=1)
        store.close()


def test_the_endpoint_page_shows_the_answers_the_service_sends() -> None:
    page = ENDPOINT.read_text()
    wrong = []
    for embedded in (False, True):
        for asked, body, allow in answers(embedded):
            if body not in page:
                wrong.append(f"{asked}{' (embedded)' if embedded else ''}: {body}")
            if allow is not None and f"Allow: {allow}" not in page:
                wrong.append(f"{asked}: Allow: {allow}")
    assert wrong == [], "answers docs/endpoint.md does not show:\n" + "\n".join(wrong)


# --- the opening ------------------------------------------------------------

# How the docs call each binding (shared.settings.CARD_BINDINGS) and each
# built-in store (a package of shared/stores/ whose store.py opens one).
BINDING_NAMES = {"JSONRPC": "JSON-RPC", "HTTP+JSON": "HTTP+JSON", "GRPC": "gRPC"}
STORE_NAMES = {
    "memory": "memory",
    "file": "file",
    "sqlite": "SQLite",
    "redis": "Redis",
    "postgres": "PostgreSQL",
}


def opening(page: Path, ends_before: str) -> str:
    text = page.read_text()
    assert ends_before in text, f"{page.relative_to(ROOT)} has no {ends_before!r}"
    return text[: text.index(ends_before)]


def test_the_opening_names_every_binding_store_and_role() -> None:
    stores = [
        path.parent.name
        for path in sorted((ROOT / "shared" / "stores").glob("*/store.py"))
        if f"def {path.parent.name}_store(" in path.read_text()
    ]
    names = [BINDING_NAMES[binding] for binding in CARD_BINDINGS]
    names += [STORE_NAMES[store] for store in stores]
    wrong = []
    for page, ends_before in ((README, "## Set up"), (HOME, "| page |")):
        text = opening(page, ends_before)
        wrong += [f"{page.name}: {name}" for name in names if name not in text]
        roles = set(re.findall(r"`(?:toolnexus-serve )?(\w+)`", text))
        wrong += [f"{page.name}: the {role} role" for role in ROLES if role not in roles]
    assert wrong == [], "not named before the reference begins:\n" + "\n".join(wrong)
