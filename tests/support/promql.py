"""What a PromQL query names: its metrics and the labels it reads, checked
against the metrics the shipped code defines and their labels; and whether
it parses at all, by Prometheus' own grammar (`syntax_errors`).

Used by the tests of the things outside the service that query it: the
Kubernetes worker scaler's Prometheus triggers and the Grafana dashboard. A
query that names a metric the service does not export, or a label that
metric does not carry, charts or scales on nothing, silently: this finds it.
"""

from __future__ import annotations

import ast
import fcntl
import functools
import json
import re
import shutil
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.code_names import SUFFIXES, shipped_files
from tests.support.docs_text import ROOT
from tests.support.redis_server import ci

# Prometheus' PromQL grammar from the npm registry (@prometheus-io/lezer-promql,
# pinned by tests/promql/package-lock.json), installed there by `npm ci`.
GRAMMAR = ROOT / "tests" / "promql"

# PromQL's own words: aggregations, functions and the keywords that may stand
# where a metric name could.
KEYWORDS = frozenset(
    {
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "offset",
        "bool",
        "and",
        "or",
        "unless",
        "atan2",
        "inf",
        "nan",
    }
)
# Labels Prometheus gives every series from its scrape target, not the service.
TARGET_LABELS = frozenset({"instance", "job"})

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_RANGE = re.compile(r"\[[^\]]*\]")
_MATCHERS = re.compile(r"\{([^}]*)\}")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_IDENTIFIER = re.compile(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(\s*\()?")
_MATCHER_LABEL = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")
# Grafana's own variables ($__rate_interval, $__interval, ${datasource}).
_GRAFANA_VARIABLE = re.compile(r"\$\{?__?\w+\}?|\$\{\w+\}|\$\w+")


@functools.cache
def metric_labels() -> dict[str, frozenset[str]]:
    """Each sample name the shipped code exports (what a query can select),
    with the labels its samples carry."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in shipped_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            func = node.func
            kind = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            first = node.args[0]
            if not (
                kind in SUFFIXES
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                continue
            labels = _labels_of(node)
            # A counter's or histogram's samples are only its suffixed names.
            samples = [first.value + suffix for suffix in SUFFIXES[kind]] or [first.value]
            for name in samples:
                found[name] |= labels
                if name.endswith("_bucket"):
                    found[name].add("le")
    return {name: frozenset(labels) for name, labels in found.items()}


def _labels_of(call: ast.Call) -> set[str]:
    """The label names a metric's definition gives: its third positional
    argument (prometheus_client's labelnames) or `labels=`/`labelnames=`."""
    given: ast.expr | None = call.args[2] if len(call.args) > 2 else None
    for keyword in call.keywords:
        if keyword.arg in ("labels", "labelnames"):
            given = keyword.value
    if not isinstance(given, (ast.List, ast.Tuple)):
        return set()
    return {
        element.value
        for element in given.elts
        if isinstance(element, ast.Constant) and isinstance(element.value, str)
    }


def problems(query: str, known: dict[str, frozenset[str]]) -> list[str]:
    """What in `query` the service does not have: an unknown metric, a label
    matched or grouped on that none of the query's metrics carries."""
    text = _GRAFANA_VARIABLE.sub("5m", query)
    text = _STRING.sub('""', text)
    text = _RANGE.sub("", text)
    wrong: list[str] = []
    grouped: set[str] = set()
    for labels in _GROUPING.findall(text):
        grouped |= {label.strip() for label in labels.split(",") if label.strip()}
    text = _GROUPING.sub(" ", text)
    # Each selector: a metric name, maybe followed by its matchers.
    selectors = re.findall(r"([a-zA-Z_:][\w:]*)?\s*\{([^}]*)\}", text)
    matched: dict[str, set[str]] = defaultdict(set)
    for metric, matchers in selectors:
        matched[metric] |= set(_MATCHER_LABEL.findall(matchers))
    bare = _MATCHERS.sub(" ", text)
    metrics = set()
    for name, call in _IDENTIFIER.findall(bare):
        if call or name in KEYWORDS or re.fullmatch(r"\d\w*", name):
            continue
        metrics.add(name)
    if not metrics:
        wrong.append(f"names no metric: {query}")
    for metric in sorted(metrics):
        if metric not in known:
            wrong.append(f"{metric}: not a metric the service exports")
    carried = set(TARGET_LABELS)
    for metric in metrics & known.keys():
        carried |= known[metric]
    for metric, labels in sorted(matched.items()):
        if not metric:
            wrong.append(f"a selector without a metric name: {query}")
            continue
        own = known.get(metric, frozenset()) | TARGET_LABELS
        wrong += [f"{metric}{{{label}}}: no such label" for label in sorted(labels - own)]
    wrong += [
        f"by/without ({label}): no metric here carries it" for label in sorted(grouped - carried)
    ]
    return wrong


def syntax_errors(queries: Sequence[str]) -> list[str]:
    """Each query that Prometheus' grammar does not parse, with where it
    stops; Grafana's variables stand as a duration, as Grafana sends them."""
    node = _node_with_grammar()
    sent = [_GRAFANA_VARIABLE.sub("5m", query) for query in queries]
    done = subprocess.run(
        [node, "parse.mjs"],
        input=json.dumps(sent),
        cwd=GRAMMAR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    answers: list[list[int]] = json.loads(done.stdout)
    return [
        f"{query}: does not parse at {where[0]}: {sent_query[where[0] :][:20]!r}"
        for query, sent_query, where in zip(queries, sent, answers, strict=True)
        if where
    ]


def _node_with_grammar() -> str:
    """node, with the grammar installed from its lockfile if it is not yet,
    so that the README's test command needs nothing more."""
    node, npm = shutil.which("node"), shutil.which("npm")
    problem = None
    if node is None or npm is None:
        problem = "NO NODE OR NPM: the PromQL queries' syntax is not checked"
    else:
        # Two test files may ask at once (pytest-xdist): one installs, the other waits.
        with (Path(tempfile.gettempdir()) / "toolnexus-promql-npm.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (GRAMMAR / "node_modules" / "@prometheus-io" / "lezer-promql").is_dir():
                installed = subprocess.run(
                    [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                    cwd=GRAMMAR,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
                if installed.returncode != 0:
                    problem = (
                        "NO PROMQL GRAMMAR: `npm ci` in tests/promql failed:"
                        f" {installed.stderr[-300:]}"
                    )
    if problem is not None:
        if ci():
            pytest.fail(problem)
        pytest.skip(problem)
    assert node is not None
    return node
