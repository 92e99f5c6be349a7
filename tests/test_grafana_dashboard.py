"""deploy/grafana/toolnexus.json charts what the service exports.

Every query of every panel parses by Prometheus' own grammar and names only
metrics the shipped code defines (with the suffixes Prometheus gives their
samples) and only labels those metrics carry, so a renamed metric or label
fails here instead of leaving a panel empty; every panel asks the one
Prometheus the dashboard's variable picks; and the views the dashboard
promises each have their panel.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.docs_text import ROOT
from tests.support.promql import metric_labels, problems, syntax_errors

DASHBOARD = ROOT / "deploy" / "grafana" / "toolnexus.json"
SOURCE = {"type": "prometheus", "uid": "${datasource}"}
# What an operator looks for on it, each by the metric that shows it.
VIEWS = {
    "tasks per second by outcome": "toolnexus_fulfilments_total",
    "run time p50/p99": "toolnexus_fulfilment_duration_seconds_bucket",
    "request latency p50/p99": "toolnexus_request_duration_seconds_bucket",
    "queue depth": "toolnexus_queue_depth",
    "oldest waiting task": "toolnexus_queue_oldest_age_seconds",
    "held": "toolnexus_tasks_held",
    "in flight": "toolnexus_tasks_in_flight",
    "workers and their slots": "toolnexus_worker_capacity",
    "calls running": "toolnexus_tasks_running",
}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panels(within: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in within.get("panels", []):
        yield panel
        yield from panels(panel)  # a row's own panels


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def test_every_query_names_what_the_service_exports(dashboard: dict[str, Any]) -> None:
    known = metric_labels()
    assert (
        "toolnexus_queue_depth" in known
        and "le" in known["toolnexus_request_duration_seconds_bucket"]
    )
    found = list(queries(dashboard))
    assert len(found) >= len(VIEWS)
    wrong = [f"{title}: {why}" for title, query in found for why in problems(query, known)]
    assert wrong == [], "\n".join(wrong)


def test_a_query_on_a_name_the_service_lacks_is_found() -> None:
    known = metric_labels()
    rate = "[$__rate_interval]"
    assert problems(f"sum by (outcome) (rate(toolnexus_fulfilments_total{rate}))", known) == []
    for wrong in [
        f"sum by (outcome) (rate(toolnexus_fulfilment_total{rate}))",  # a misspelt metric
        f"sum by (state) (rate(toolnexus_fulfilments_total{rate}))",  # a label it lacks
        'max(toolnexus_queue_depth{queues="toolnexus"})',  # a matcher on a label it lacks
        "sum(up)",  # not the service's
        "sum(rate(toolnexus_fulfilment_duration_seconds[5m]))",  # a histogram's bare name
    ]:
        assert problems(wrong, known) != [], wrong


def test_every_query_parses_as_prometheus_parses_it(dashboard: dict[str, Any]) -> None:
    found = [query for _, query in queries(dashboard)]
    assert syntax_errors(found) == []
    broken = ["sum by (outcome (rate(toolnexus_fulfilments_total[5m]))", "rates(x[5m])"]
    assert len(syntax_errors(broken)) == len(broken)


def test_every_panel_asks_the_chosen_prometheus(dashboard: dict[str, Any]) -> None:
    (variable,) = dashboard["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    assert dashboard["uid"] and dashboard["title"]
    for panel in panels(dashboard):
        assert panel["datasource"] == SOURCE, panel["title"]
        assert all(target["datasource"] == SOURCE for target in panel["targets"]), panel["title"]
        assert panel.get("description"), f"{panel['title']}: say what it shows"
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids))


def test_each_view_has_its_panel(dashboard: dict[str, Any]) -> None:
    text = " ".join(query for _, query in queries(dashboard))
    missing = [view for view, metric in VIEWS.items() if metric not in text]
    assert missing == []
