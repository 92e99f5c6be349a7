"""The names the shipped code gives things a doc may name: the settings it
reads, the metrics it exports, and what its comments and docstrings say."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from shared.settings import RENAMED, Settings
from tests.support.docs_text import ROOT, Spot

SHIPPED = ("shared", "web", "worker", "toolnexus", "examples")
# A whole setting's name: not a prefix (`TOOLNEXUS_JWT_*`, `TOOLNEXUS_REDIS_...`).
SETTING = re.compile(r"TOOLNEXUS_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_*])")
METRIC = re.compile(r"(?<![\w-])toolnexus_[a-z0-9_]*[a-z0-9](?![\w-])")
# The suffixes Prometheus gives the samples of each kind of metric.
SUFFIXES: dict[str, tuple[str, ...]] = {
    "Counter": ("_total", "_created"),
    "CounterMetricFamily": ("_total", "_created"),
    "Gauge": (),
    "GaugeMetricFamily": (),
    "Histogram": ("_bucket", "_count", "_sum", "_created"),
    "HistogramMetricFamily": ("_bucket", "_count", "_sum", "_created"),
    "Summary": ("_count", "_sum", "_created"),
    "SummaryMetricFamily": ("_count", "_sum", "_created"),
    "Info": ("_info",),
}
_ONE_WORD = re.compile(r"[rbuf]*(['\"])[\w.-]*\1")


def shipped_files() -> list[Path]:
    return [path for package in SHIPPED for path in sorted((ROOT / package).rglob("*.py"))]


def comments_and_strings(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line, text, whether it is a comment) for each comment and string of a module."""
    source = io.StringIO(path.read_text()).readline
    for token in tokenize.generate_tokens(source):
        if token.type in (tokenize.COMMENT, tokenize.STRING):
            yield token.start[0], token.string, token.type == tokenize.COMMENT


def prose(path: Path, *, strings: bool) -> Iterator[Spot]:
    """The module's comments, and with `strings` its docstrings and other
    strings of more than one word: where it talks of things, not uses them."""
    for number, text, comment in comments_and_strings(path):
        if comment or (strings and not _ONE_WORD.fullmatch(text)):
            yield Spot(path, number, text)


def words(path: Path) -> Iterator[str]:
    """Each string of the module that is one word, unquoted: a name it uses."""
    for _, text, comment in comments_and_strings(path):
        if not comment and _ONE_WORD.fullmatch(text):
            yield text.lstrip("rbuf").strip("'\"")


def settings_in(text: str) -> set[str]:
    return set(SETTING.findall(text))


def read_by_the_service() -> set[str]:
    """The settings, the names the service refuses as renamed, the names its
    code reads by string, and what compose, .env.example and the image set."""
    names = set(Settings.variables()) | set(RENAMED)
    names |= {word for path in shipped_files() for word in words(path) if SETTING.fullmatch(word)}
    for path in (*ROOT.glob("compose*.yaml"), ROOT / ".env.example", ROOT / "Dockerfile"):
        names |= settings_in(path.read_text())
    return names


def read_by_the_tests(but: Path) -> set[str]:
    """The names the tests, the benchmarks, tools/ and CI use that the service
    does not read; `but` a file not to count (the one that asks)."""
    files = [
        *ROOT.glob("tests/**/*.py"),
        *ROOT.glob("bench/**/*.py"),
        *(path for path in (ROOT / "tools").iterdir() if path.is_file()),
        ROOT / ".ci" / "run",
        ROOT / "pyproject.toml",
    ]
    named = {name for path in files if path != but for name in settings_in(path.read_text())}
    return named - read_by_the_service()


def exported_metrics() -> set[str]:
    """Every sample name of the metrics the shipped code defines."""
    names = set()
    for path in shipped_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            kind = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            first = node.args[0]
            if (
                kind in SUFFIXES
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                names |= {first.value, *(first.value + suffix for suffix in SUFFIXES[kind])}
    return names


def other_names() -> set[str]:
    """`toolnexus_…` words the code uses for other things: headers, commands, fields."""
    return {word for path in shipped_files() for word in words(path) if METRIC.fullmatch(word)}
